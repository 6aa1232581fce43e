import { readdirSync } from 'node:fs';
import { ERROR_CODES } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { Methods, Notifications } from '../src/index.js';
import {
  loadTranscripts,
  matchPattern,
  TranscriptFormatError,
  transcriptProblems,
  transcriptsDir,
} from '../src/transcripts.js';

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

describe('matchPattern', () => {
  const empty = new Map<string, unknown>();
  const ok = (pattern: unknown, actual: unknown, bindings = empty, run = 'r1') =>
    matchPattern(pattern, actual, bindings, run).ok;

  it('objects match exactly their members; arrays element by element', () => {
    expect(ok({ a: 1, b: [1, 'x'] }, { a: 1, b: [1, 'x'] })).toBe(true);
    expect(ok({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(ok({ a: 1, b: 2 }, { a: 1 })).toBe(false);
    expect(ok([1, 2], [1, 2, 3])).toBe(false);
    expect(ok(null, null)).toBe(true);
    expect(ok(1, '1')).toBe(false);
  });

  it('$capture binds, $ref compares, and a failed match binds nothing', () => {
    const first = matchPattern({ t: { $capture: 'tok' } }, { t: '17' }, empty, 'r');
    expect(first.ok && first.bindings.get('tok')).toBe('17');
    const bindings = first.ok ? first.bindings : empty;
    expect(ok({ t: { $ref: 'tok' } }, { t: '17' }, bindings)).toBe(true);
    expect(ok({ t: { $ref: 'tok' } }, { t: '18' }, bindings)).toBe(false);
    const failed = matchPattern(
      { a: { $capture: 'x' }, b: 1 },
      { a: 'captured', b: 2 },
      empty,
      'r',
    );
    expect(failed.ok).toBe(false);
    expect(() => ok({ $ref: 'unbound' }, 1)).toThrow(TranscriptFormatError);
  });

  it('$gt compares tokens as big integers, beyond 2^53', () => {
    const bindings = new Map([['t', '9007199254740993']]);
    expect(ok({ $gt: 't' }, '9007199254740994', bindings)).toBe(true);
    expect(ok({ $gt: 't' }, '9007199254740993', bindings)).toBe(false);
    expect(ok({ $gt: 't' }, '900719925474099', bindings)).toBe(false);
    expect(ok({ $gt: 't' }, 'abc', bindings)).toBe(false);
  });

  it('$any checks types, including token', () => {
    expect(ok({ $any: 'token' }, '42')).toBe(true);
    expect(ok({ $any: 'token' }, '042')).toBe(false);
    expect(ok({ $any: 'token' }, '9223372036854775808')).toBe(false);
    expect(ok({ $any: 'token' }, 42)).toBe(false);
    expect(ok({ $any: 'integer' }, 1.5)).toBe(false);
    expect(ok({ $any: 'object' }, [])).toBe(false);
    expect(ok({ $any: 'value' }, null)).toBe(true);
    expect(() => ok({ $any: 'uuid' }, 'x')).toThrow(TranscriptFormatError);
  });

  it('$between is inclusive; $optional lets a member be absent but checks it when present', () => {
    expect(ok({ $between: [0, 10] }, 10)).toBe(true);
    expect(ok({ $between: [0, 10] }, 10.5)).toBe(false);
    expect(ok({ $between: [0, 10] }, '5')).toBe(false);
    const pattern = { code: 1, ms: { $between: [0, 10], $optional: true } };
    expect(ok(pattern, { code: 1 })).toBe(true);
    expect(ok(pattern, { code: 1, ms: 5 })).toBe(true);
    expect(ok(pattern, { code: 1, ms: 50 })).toBe(false);
  });

  it('{{run}} is replaced in expected strings', () => {
    expect(ok({ name: '{{run}}/jobs' }, { name: 'r1/jobs' })).toBe(true);
    expect(ok({ name: '{{run}}/jobs' }, { name: '{{run}}/jobs' })).toBe(false);
  });

  it('an unknown placeholder key is a transcript error, not a mismatch', () => {
    expect(() => ok({ $regex: '.*' }, 'x')).toThrow(TranscriptFormatError);
  });
});
