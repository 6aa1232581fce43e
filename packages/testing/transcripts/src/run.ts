import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  type Transcript,
  TranscriptFormatError,
  type TranscriptStep,
} from '@dlm/protocol/transcripts';
import { Connection, type Received } from './connection.js';
import { show } from './frames.js';
import { type Bindings, matchPattern, substitute, substituteRun } from './match.js';
import { type ConnectStep, connectAsExpected } from './upgrade.js';

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

type Step<K extends string> = Extract<TranscriptStep, Record<K, unknown>>;
type Elapsed = { since: string; min?: number; max?: number } | undefined;

const DEFAULT_TIMEOUT_MS = 5_000;
/** Timer granularity: a frame may be timestamped up to this much before a nominal deadline. */
const TIMING_SLACK_MS = 1;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function randomRunId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(12)].map((byte) => alphabet[byte % alphabet.length]).join('');
}

/** The state of one replay: its connections, marks, bindings and the step being run. */
export class TranscriptRun {
  private readonly run: string;
  private readonly checkSchemas: boolean;
  private readonly defaultTimeoutMs: number;
  private readonly conns = new Map<string, Connection>();
  private readonly marks = new Map<string, number>();
  private bindings: Bindings = new Map();
  private index = 0;

  constructor(
    private readonly url: string,
    private readonly transcript: Transcript,
    options: RunTranscriptOptions,
  ) {
    this.run = options.run ?? randomRunId();
    this.checkSchemas = options.checkSchemas ?? true;
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Runs every step, then checks that nothing arrived that no step expected. */
  async replay(): Promise<void> {
    try {
      for (; this.index < this.transcript.steps.length; this.index += 1) {
        const step = this.transcript.steps[this.index]!;
        await this.perform(step);
        this.failOnProblems(this.conns.get(step.conn ?? 'a'));
      }
      this.index = -1;
      for (const conn of this.conns.values()) this.checkDrained(conn);
    } finally {
      for (const conn of this.conns.values()) conn.ws?.terminate();
    }
  }

  private fail = (message: string): never => {
    throw new TranscriptFailure(this.transcript.name, this.index, message);
  };

  private failOnProblems(conn: Connection | undefined): void {
    if (conn?.problems.length) this.fail(conn.problems.join('; '));
  }

  private checkDrained(conn: Connection): void {
    this.failOnProblems(conn);
    const left = conn.unconsumed();
    if (left.length) {
      this.fail(
        `connection ${conn.name} received frames no step expected:` +
          left.map((item) => `\n  ${show(item.frame)}`).join(''),
      );
    }
  }

  private connOf(step: TranscriptStep): Connection {
    const name = step.conn ?? 'a';
    let conn = this.conns.get(name);
    if (!conn) {
      conn = new Connection(name);
      this.conns.set(name, conn);
    }
    return conn;
  }

  private openSocket(conn: Connection) {
    if (!conn.isOpen) this.fail(`connection ${conn.name} is not open`);
    return conn.ws!;
  }

  private checkElapsed(elapsed: Elapsed, at: number, what: string): void {
    if (!elapsed) return;
    const start = this.marks.get(elapsed.since);
    if (start === undefined) throw new TranscriptFormatError(`no mark ${elapsed.since}`);
    const ms = at - start;
    if (elapsed.min !== undefined && ms + TIMING_SLACK_MS < elapsed.min) {
      this.fail(
        `${what} arrived ${ms.toFixed(1)} ms after ${elapsed.since}, before ${elapsed.min}`,
      );
    }
    if (elapsed.max !== undefined && ms > elapsed.max) {
      this.fail(`${what} arrived ${ms.toFixed(1)} ms after ${elapsed.since}, after ${elapsed.max}`);
    }
  }

  /** Runs one step on its connection. */
  private async perform(step: TranscriptStep): Promise<void> {
    const conn = this.connOf(step);
    if ('connect' in step) return this.connect(conn, step);
    if ('send' in step) return this.sendFrame(conn, step);
    if ('sendText' in step) return this.sendText(conn, step);
    if ('sendBinary' in step) {
      return this.send(conn, Buffer.from(step.sendBinary, 'hex'), step.times ?? 1, step.mark);
    }
    if ('expect' in step) return this.expectFrames(conn, step);
    if ('expectNone' in step) return this.expectNone(conn, step);
    if ('expectClose' in step) return this.expectClose(conn, step);
    if ('close' in step) return this.close(conn, step);
    if ('sleep' in step) return sleep(step.sleep);
    this.marks.set(step.mark, performance.now());
  }

  private async connect(conn: Connection, step: ConnectStep): Promise<void> {
    if (conn.isOpen) this.fail(`connection ${conn.name} is already open`);
    const left = conn.unconsumed();
    if (left.length) {
      this.fail(
        `connection ${conn.name} is reopened with frames no step expected: ${show(left[0]!.frame)}`,
      );
    }
    const ws = await connectAsExpected(this.url, step.connect, this.defaultTimeoutMs, this.fail);
    if (ws) conn.adopt(ws, this.checkSchemas, step.connect.multi === true);
  }

  private send(conn: Connection, data: string | Buffer, times: number, mark: string | undefined) {
    const ws = this.openSocket(conn);
    if (mark !== undefined) this.marks.set(mark, performance.now());
    for (let i = 0; i < times; i += 1) ws.send(data);
  }

  private sendFrame(conn: Connection, step: Step<'send'>): void {
    const frame = substitute(step.send, this.bindings, this.run);
    let text = JSON.stringify(frame);
    if (step.padToBytes !== undefined) {
      const bytes = Buffer.byteLength(text);
      if (bytes > step.padToBytes) {
        throw new TranscriptFormatError(`the frame is already ${bytes} bytes`);
      }
      text += ' '.repeat(step.padToBytes - bytes);
    }
    for (const message of Array.isArray(frame) ? frame : [frame]) conn.remember(message);
    this.send(conn, text, step.times ?? 1, step.mark);
  }

  private sendText(conn: Connection, step: Step<'sendText'>): void {
    const text =
      typeof step.sendText === 'string'
        ? substituteRun(step.sendText, this.run)
        : step.sendText.repeat.repeat(step.sendText.count);
    this.send(conn, text, step.times ?? 1, step.mark);
  }

  /** The first unconsumed frame matching `pattern` (binding its captures), if any. */
  private take(conn: Connection, pattern: unknown): Received | undefined {
    for (const item of conn.unconsumed()) {
      const result = matchPattern(pattern, item.frame, this.bindings, this.run);
      if (result.ok) {
        this.bindings = result.bindings;
        return item;
      }
    }
    return undefined;
  }

  private async expectFrames(conn: Connection, step: Step<'expect'>): Promise<void> {
    const deadline = performance.now() + (step.timeoutMs ?? this.defaultTimeoutMs);
    for (let n = 0; n < (step.times ?? 1); n += 1) {
      let found: Received | undefined;
      const matched = await conn.waitFor(() => {
        found = this.take(conn, step.expect);
        return found !== undefined || conn.problems.length > 0;
      }, deadline);
      this.failOnProblems(conn);
      if (!matched || !found) this.fail(this.missing(conn, step, n));
      found!.consumed = true;
      this.checkElapsed(step.elapsed, found!.at, `the frame ${show(found!.frame)}`);
    }
  }

  /** Why an `expect` step failed: how many frames matched, and what arrived instead. */
  private missing(conn: Connection, step: Step<'expect'>, n: number): string {
    const pattern = show(step.expect);
    const pending = conn
      .unconsumed()
      .slice(0, 5)
      .map((item) => {
        const result = matchPattern(step.expect, item.frame, this.bindings, this.run);
        return `\n  ${show(item.frame)}${result.ok ? '' : ` (${result.why})`}`;
      })
      .join('');
    const closed = conn.closed ? ` The connection closed with ${conn.closed.code}.` : '';
    return (
      `${n} of ${step.times ?? 1} frames matching ${pattern} arrived in ` +
      `${step.timeoutMs ?? this.defaultTimeoutMs} ms.${closed} Unconsumed frames:${pending || ' none'}`
    );
  }

  private async expectNone(conn: Connection, step: Step<'expectNone'>): Promise<void> {
    const deadline = performance.now() + step.forMs;
    let hit: Received | undefined;
    await conn.waitFor(() => {
      hit = conn
        .unconsumed()
        .find((item) => matchPattern(step.expectNone, item.frame, this.bindings, this.run).ok);
      return hit !== undefined || conn.problems.length > 0;
    }, deadline);
    this.failOnProblems(conn);
    if (hit) this.fail(`a frame arrived that should not have: ${show(hit.frame)}`);
  }

  private async expectClose(conn: Connection, step: Step<'expectClose'>): Promise<void> {
    if (!conn.ws) this.fail(`connection ${conn.name} was never opened`);
    const deadline = performance.now() + (step.timeoutMs ?? this.defaultTimeoutMs);
    if (!(await conn.waitFor(() => conn.closed !== undefined, deadline))) {
      this.fail(`the server did not close connection ${conn.name}`);
    }
    const { code, at } = conn.closed!;
    if (step.expectClose.code !== undefined && code !== step.expectClose.code) {
      this.fail(`the connection closed with code ${code}, not ${step.expectClose.code}`);
    }
    this.checkElapsed(step.elapsed, at, 'the close');
  }

  private async close(conn: Connection, step: Step<'close'>): Promise<void> {
    const ws = this.openSocket(conn);
    ws.close(step.close.code ?? 1000);
    const deadline = performance.now() + this.defaultTimeoutMs;
    if (!(await conn.waitFor(() => conn.closed !== undefined, deadline))) {
      this.fail(`connection ${conn.name} did not finish closing`);
    }
  }
}
