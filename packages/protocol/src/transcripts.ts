import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { conforms } from './conforms.js';
import { SUBPROTOCOL } from './constants.js';
import type { MethodName, NotificationName } from './schemas.js';
import { type Transcript, type TranscriptStep, transcriptProblems } from './transcript-format.js';
import {
  type Bindings,
  matchPattern,
  substitute,
  substituteRun,
  TranscriptFormatError,
} from './transcript-match.js';

export type { Transcript, TranscriptStep } from './transcript-format.js';
export { transcriptJsonSchema, transcriptProblems } from './transcript-format.js';
export { matchPattern, TranscriptFormatError } from './transcript-match.js';

/** The golden transcripts shipped with this package (`transcripts/*.json`). */
export const transcriptsDir: URL = new URL('../transcripts/', import.meta.url);

/** Reads every `*.json` transcript in `dir` (default: this package's), sorted by file name. */
export function loadTranscripts(dir: URL | string = transcriptsDir): Transcript[] {
  const href = typeof dir === 'string' ? pathToFileURL(dir).href : dir.href;
  const baseUrl = new URL(href.endsWith('/') ? href : `${href}/`);
  return readdirSync(baseUrl)
    .filter((file) => file.endsWith('.json') && !file.endsWith('.schema.json'))
    .sort()
    .map((file) => {
      const value: unknown = JSON.parse(readFileSync(new URL(file, baseUrl), 'utf8'));
      const problems = transcriptProblems(value);
      if (problems.length) {
        throw new TranscriptFormatError(`${file} is not a transcript: ${problems.join('; ')}`);
      }
      return value as Transcript;
    });
}

export interface RunTranscriptOptions {
  /**
   * Replaces `{{run}}` in every string, so that lock names do not collide between runs on one
   * server. Default: 12 random lowercase letters and digits.
   */
  run?: string;
  /** Check every frame the server sends against the protocol's schemas (default true). */
  checkSchemas?: boolean;
  /** How long `expect` and `expectClose` wait by default, ms (default 5000). */
  defaultTimeoutMs?: number;
}

/** A server (or client) did not behave as the transcript says. */
export class TranscriptFailure extends Error {
  override readonly name = 'TranscriptFailure';
  constructor(
    readonly transcript: string,
    /** Index of the failing step in `steps` (-1: after the last step). */
    readonly stepIndex: number,
    message: string,
  ) {
    super(`${transcript}, step ${stepIndex < 0 ? 'end' : stepIndex}: ${message}`);
  }
}

interface Received {
  frame: unknown;
  at: number;
  consumed: boolean;
}

interface Conn {
  name: string;
  ws: WebSocket | undefined;
  received: Received[];
  closed: { code: number; reason: string; at: number } | undefined;
  wakers: Set<() => void>;
  /** Request id → method, to check results against the right schema. */
  methods: Map<string, MethodName>;
  problems: string[];
}

const DEFAULT_TIMEOUT_MS = 5_000;
/** Timer granularity: a frame may be timestamped up to this much before a nominal deadline. */
const TIMING_SLACK_MS = 1;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function randomRunId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(12)].map((byte) => alphabet[byte % alphabet.length]).join('');
}

function idKey(id: unknown): string {
  return JSON.stringify(id);
}

function show(value: unknown): string {
  const text = JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

function schemaProblem(conn: Conn, frame: unknown): string | undefined {
  if (typeof frame !== 'object' || frame === null || Array.isArray(frame)) {
    return 'the server sent a frame that is not a JSON object';
  }
  const message = frame as Record<string, unknown>;
  if (message.jsonrpc !== '2.0') return 'the server sent a frame without jsonrpc "2.0"';
  if ('error' in message) {
    return conforms({ error: true }, message.error) ? undefined : 'an error object off-schema';
  }
  if ('result' in message) {
    const method = conn.methods.get(idKey(message.id));
    if (method && !conforms({ result: method }, message.result)) {
      return `a ${method} result off-schema`;
    }
    return undefined;
  }
  if (message.method === 'lock.changed' || message.method === 'lock.lost') {
    return conforms({ notification: message.method as NotificationName }, message.params)
      ? undefined
      : `a ${message.method} notification off-schema`;
  }
  return 'the server sent a frame that is neither a reply nor a known notification';
}

/**
 * Replays a golden transcript against the server at `url` (`ws://host:port/v1/ws`), and
 * rejects with a `TranscriptFailure` saying which step went wrong and what arrived instead.
 * Every connection the transcript opened is closed when it ends, whatever the outcome.
 *
 * @example
 * import { loadTranscripts, runTranscript } from '@dlm/protocol/transcripts';
 *
 * for (const transcript of loadTranscripts()) await runTranscript(server.url, transcript);
 */
export async function runTranscript(
  url: string,
  transcript: Transcript,
  options: RunTranscriptOptions = {},
): Promise<void> {
  const run = options.run ?? randomRunId();
  const checkSchemas = options.checkSchemas ?? true;
  const defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  const conns = new Map<string, Conn>();
  const marks = new Map<string, number>();
  let bindings: Bindings = new Map();
  let index = 0;

  const fail = (message: string): never => {
    throw new TranscriptFailure(transcript.name, index, message);
  };

  function connOf(step: TranscriptStep): Conn {
    const name = step.conn ?? 'a';
    let conn = conns.get(name);
    if (!conn) {
      conn = {
        name,
        ws: undefined,
        received: [],
        closed: undefined,
        wakers: new Set(),
        methods: new Map(),
        problems: [],
      };
      conns.set(name, conn);
    }
    return conn;
  }

  function openConn(conn: Conn): WebSocket {
    if (!conn.ws || conn.closed) fail(`connection ${conn.name} is not open`);
    return conn.ws!;
  }

  function wake(conn: Conn): void {
    for (const waker of [...conn.wakers]) waker();
  }

  /** Waits until `ready()` or the deadline; true when ready. */
  async function waitFor(conn: Conn, ready: () => boolean, deadline: number): Promise<boolean> {
    for (;;) {
      if (ready()) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, left);
        function done() {
          clearTimeout(timer);
          conn.wakers.delete(done);
          resolve();
        }
        conn.wakers.add(done);
      });
    }
  }

  function checkElapsed(
    elapsed: { since: string; min?: number; max?: number } | undefined,
    at: number,
    what: string,
  ): void {
    if (!elapsed) return;
    const start = marks.get(elapsed.since);
    if (start === undefined) throw new TranscriptFormatError(`no mark ${elapsed.since}`);
    const ms = at - start;
    if (elapsed.min !== undefined && ms + TIMING_SLACK_MS < elapsed.min) {
      fail(`${what} arrived ${ms.toFixed(1)} ms after ${elapsed.since}, before ${elapsed.min}`);
    }
    if (elapsed.max !== undefined && ms > elapsed.max) {
      fail(`${what} arrived ${ms.toFixed(1)} ms after ${elapsed.since}, after ${elapsed.max}`);
    }
  }

  async function connect(conn: Conn, spec: Extract<TranscriptStep, { connect: unknown }>) {
    if (conn.ws && !conn.closed) fail(`connection ${conn.name} is already open`);
    const left = unconsumed(conn);
    if (left.length) {
      fail(
        `connection ${conn.name} is reopened with frames no step expected: ${show(left[0]!.frame)}`,
      );
    }
    const target = new URL(url);
    if (spec.connect.path !== undefined) target.pathname = spec.connect.path;
    const protocols = spec.connect.protocols ?? [SUBPROTOCOL];
    const ws = new WebSocket(target, protocols.length ? protocols : undefined, {
      perMessageDeflate: false,
      handshakeTimeout: defaultTimeoutMs,
    });
    const outcome = await new Promise<{ open: true } | { status: number } | { error: Error }>(
      (resolve) => {
        ws.once('open', () => resolve({ open: true }));
        ws.once('unexpected-response', (request, response) => {
          resolve({ status: response.statusCode ?? 0 });
          response.resume();
          request.destroy();
        });
        ws.once('error', (error) => resolve({ error }));
      },
    );
    ws.on('error', () => {});
    const { expectStatus, expectProtocol } = spec.connect;
    if ('error' in outcome) fail(`could not connect: ${outcome.error.message}`);
    if ('status' in outcome) {
      if (expectStatus === undefined) fail(`the upgrade was refused with HTTP ${outcome.status}`);
      if (outcome.status !== expectStatus) {
        fail(`the upgrade was refused with HTTP ${outcome.status}, not ${expectStatus}`);
      }
      return;
    }
    if (expectStatus !== undefined) {
      ws.terminate();
      fail(`the upgrade succeeded; expected HTTP ${expectStatus}`);
    }
    const picked = ws.protocol === '' ? null : ws.protocol;
    if (expectProtocol !== undefined && picked !== expectProtocol) {
      ws.terminate();
      fail(`the server picked subprotocol ${show(picked)}, not ${show(expectProtocol)}`);
    }
    conn.ws = ws;
    conn.closed = undefined;
    conn.received = [];
    conn.methods.clear();
    ws.on('message', (data, isBinary) => {
      const at = performance.now();
      if (isBinary) {
        conn.problems.push('the server sent a binary frame');
        wake(conn);
        return;
      }
      let frame: unknown;
      try {
        frame = JSON.parse(data.toString());
      } catch {
        conn.problems.push(`the server sent a frame that is not JSON: ${data.toString()}`);
        wake(conn);
        return;
      }
      if (checkSchemas) {
        const problem = schemaProblem(conn, frame);
        if (problem) conn.problems.push(`${problem}: ${show(frame)}`);
      }
      conn.received.push({ frame, at, consumed: false });
      wake(conn);
    });
    ws.on('close', (code, reason) => {
      conn.closed = { code, reason: reason.toString(), at: performance.now() };
      wake(conn);
    });
  }

  function send(conn: Conn, data: string | Buffer, times: number, mark: string | undefined) {
    const ws = openConn(conn);
    if (mark !== undefined) marks.set(mark, performance.now());
    for (let i = 0; i < times; i += 1) ws.send(data);
  }

  function remember(conn: Conn, frame: unknown): void {
    if (typeof frame !== 'object' || frame === null) return;
    const { id, method } = frame as { id?: unknown; method?: unknown };
    if (id !== undefined && typeof method === 'string') {
      conn.methods.set(idKey(id), method as MethodName);
    }
  }

  function unconsumed(conn: Conn): Received[] {
    return conn.received.filter((item) => !item.consumed);
  }

  async function expectFrames(conn: Conn, step: Extract<TranscriptStep, { expect: unknown }>) {
    const deadline = performance.now() + (step.timeoutMs ?? defaultTimeoutMs);
    for (let n = 0; n < (step.times ?? 1); n += 1) {
      let found: Received | undefined;
      const matched = await waitFor(
        conn,
        () => {
          for (const item of unconsumed(conn)) {
            const result = matchPattern(step.expect, item.frame, bindings, run);
            if (result.ok) {
              bindings = result.bindings;
              found = item;
              return true;
            }
          }
          return conn.problems.length > 0;
        },
        deadline,
      );
      if (conn.problems.length) fail(conn.problems.join('; '));
      if (!matched || !found) {
        const pattern = show(step.expect);
        const pending = unconsumed(conn)
          .slice(0, 5)
          .map((item) => {
            const result = matchPattern(step.expect, item.frame, bindings, run);
            return `\n  ${show(item.frame)}${result.ok ? '' : ` (${result.why})`}`;
          })
          .join('');
        const closed = conn.closed ? ` The connection closed with ${conn.closed.code}.` : '';
        fail(
          `${n} of ${step.times ?? 1} frames matching ${pattern} arrived in ` +
            `${step.timeoutMs ?? defaultTimeoutMs} ms.${closed} Unconsumed frames:${pending || ' none'}`,
        );
      }
      found!.consumed = true;
      checkElapsed(step.elapsed, found!.at, `the frame ${show(found!.frame)}`);
    }
  }

  async function perform(step: TranscriptStep): Promise<void> {
    const conn = connOf(step);
    if ('connect' in step) return connect(conn, step);
    if ('send' in step) {
      const frame = substitute(step.send, bindings, run);
      let text = JSON.stringify(frame);
      if (step.padToBytes !== undefined) {
        const bytes = Buffer.byteLength(text);
        if (bytes > step.padToBytes) {
          throw new TranscriptFormatError(`the frame is already ${bytes} bytes`);
        }
        text += ' '.repeat(step.padToBytes - bytes);
      }
      remember(conn, frame);
      return send(conn, text, step.times ?? 1, step.mark);
    }
    if ('sendText' in step) {
      const text =
        typeof step.sendText === 'string'
          ? substituteRun(step.sendText, run)
          : step.sendText.repeat.repeat(step.sendText.count);
      return send(conn, text, step.times ?? 1, step.mark);
    }
    if ('sendBinary' in step) {
      return send(conn, Buffer.from(step.sendBinary, 'hex'), step.times ?? 1, step.mark);
    }
    if ('expect' in step) return expectFrames(conn, step);
    if ('expectNone' in step) {
      const deadline = performance.now() + step.forMs;
      let hit: Received | undefined;
      await waitFor(
        conn,
        () => {
          hit = unconsumed(conn).find(
            (item) => matchPattern(step.expectNone, item.frame, bindings, run).ok,
          );
          return hit !== undefined || conn.problems.length > 0;
        },
        deadline,
      );
      if (conn.problems.length) fail(conn.problems.join('; '));
      if (hit) fail(`a frame arrived that should not have: ${show(hit.frame)}`);
      return;
    }
    if ('expectClose' in step) {
      if (!conn.ws) fail(`connection ${conn.name} was never opened`);
      const deadline = performance.now() + (step.timeoutMs ?? defaultTimeoutMs);
      if (!(await waitFor(conn, () => conn.closed !== undefined, deadline))) {
        fail(`the server did not close connection ${conn.name}`);
      }
      const { code, at } = conn.closed!;
      if (step.expectClose.code !== undefined && code !== step.expectClose.code) {
        fail(`the connection closed with code ${code}, not ${step.expectClose.code}`);
      }
      checkElapsed(step.elapsed, at, 'the close');
      return;
    }
    if ('close' in step) {
      const ws = openConn(conn);
      ws.close(step.close.code ?? 1000);
      const deadline = performance.now() + defaultTimeoutMs;
      if (!(await waitFor(conn, () => conn.closed !== undefined, deadline))) {
        fail(`connection ${conn.name} did not finish closing`);
      }
      return;
    }
    if ('sleep' in step) return sleep(step.sleep);
    marks.set(step.mark, performance.now());
  }

  try {
    for (; index < transcript.steps.length; index += 1) {
      await perform(transcript.steps[index]!);
      const conn = conns.get(transcript.steps[index]!.conn ?? 'a');
      if (conn?.problems.length) fail(conn.problems.join('; '));
    }
    index = -1;
    for (const conn of conns.values()) {
      if (conn.problems.length) fail(conn.problems.join('; '));
      const left = unconsumed(conn);
      if (left.length) {
        fail(
          `connection ${conn.name} received frames no step expected:` +
            left.map((item) => `\n  ${show(item.frame)}`).join(''),
        );
      }
    }
  } finally {
    for (const conn of conns.values()) conn.ws?.terminate();
  }
}
