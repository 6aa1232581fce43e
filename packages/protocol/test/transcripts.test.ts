import { readdirSync } from 'node:fs';
import { ERROR_CODES } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { Methods, Notifications } from '../src/index.js';
import { loadTranscripts, transcriptProblems, transcriptsDir } from '../src/transcripts.js';

/** Error codes the default server cannot be made to produce by a client (see the README). */
const NOT_COVERED = ['INTERNAL', 'UNAVAILABLE', 'UNAUTHENTICATED', 'FORBIDDEN', 'CANCELLED'];

function walk(value: unknown, visit: (object: Record<string, unknown>) => void): void {
  if (Array.isArray(value)) for (const item of value) walk(item, visit);
  else if (typeof value === 'object' && value !== null) {
    visit(value as Record<string, unknown>);
    for (const item of Object.values(value)) walk(item, visit);
  }
}

describe('shipped transcripts', () => {
  const transcripts = loadTranscripts();

  it('are well-formed, one per file, named after their file', () => {
    const files = readdirSync(transcriptsDir)
      .filter((f) => f.endsWith('.json'))
      .sort();
    expect(transcripts.map((t) => `${t.name}.json`)).toEqual(files);
  });

  it('send every method and expect every notification', () => {
    const sent = new Set<string>();
    const expected = new Set<string>();
    for (const t of transcripts) {
      for (const step of t.steps) {
        if ('send' in step)
          walk(step.send, (o) => typeof o.method === 'string' && sent.add(o.method));
        if ('expect' in step)
          walk(step.expect, (o) => typeof o.method === 'string' && expected.add(o.method));
      }
    }
    for (const method of Object.keys(Methods)) expect(sent, method).toContain(method);
    for (const method of Object.keys(Notifications)) expect(expected, method).toContain(method);
  });

  it('expect every error code a client can cause, with its number and retryability', () => {
    const seen = new Set<string>();
    for (const t of transcripts) {
      for (const step of t.steps) {
        if (!('expect' in step)) continue;
        walk(step.expect, (o) => {
          const error = o.error as
            | { code: number; data: { code: keyof typeof ERROR_CODES; retryable: boolean } }
            | undefined;
          if (!error?.data) return;
          expect(error.code).toBe(ERROR_CODES[error.data.code].rpc);
          expect(error.data.retryable).toBe(ERROR_CODES[error.data.code].retryable);
          seen.add(error.data.code);
        });
      }
    }
    const coverable = Object.keys(ERROR_CODES).filter((code) => !NOT_COVERED.includes(code));
    expect([...seen].sort()).toEqual(coverable.sort());
  });

  it('cover close 1009, subprotocol refusal, timings and several connections', () => {
    const steps = transcripts.flatMap((t) => t.steps);
    expect(steps.some((s) => 'expectClose' in s && s.expectClose.code === 1009)).toBe(true);
    expect(steps.some((s) => 'connect' in s && s.connect.expectStatus === 400)).toBe(true);
    expect(steps.some((s) => 'sendBinary' in s)).toBe(true);
    expect(
      steps.filter((s) => 'elapsed' in s && s.elapsed?.min !== undefined).length,
    ).toBeGreaterThan(3);
    expect(steps.some((s) => s.conn === 'c')).toBe(true);
  });

  it('a malformed transcript is reported with where it is wrong', () => {
    expect(
      transcriptProblems({ name: 'x', description: '', covers: ['a'], steps: [] }),
    ).not.toEqual([]);
    expect(
      transcriptProblems({
        name: 'x',
        description: '',
        covers: ['a'],
        steps: [{ sleep: 10, extra: true }],
      }).length,
    ).toBeGreaterThan(0);
  });
});
