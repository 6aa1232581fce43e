import { closeSync, openSync, readdirSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { isDlmError } from '@dlm/core';
import type { LockOpEvent, LockOpName } from './linearizability.js';
import { monoNow } from './time.js';

/**
 * The history of a run: every operation of every process, as Jepsen records it. An operation
 * is an `invoke` followed by at most one completion: `ok`, `fail` (it certainly did not take
 * effect) or `info` (unknown: it may have). An invoke without any completion (its process was
 * killed) is unknown too. Times are `monoNow()`: one monotonic time line for all processes.
 */
export type Phase = 'invoke' | 'ok' | 'fail' | 'info';

/** How a failed call completes its operation: `fail` when it certainly had no effect, `info` when it may have. */
export function completionOf(error: unknown): { type: Phase; error: string } {
  if (isDlmError(error)) {
    const unknown =
      error.code === 'UNAVAILABLE'
        ? error.details.indeterminate === true
        : error.code === 'INTERNAL';
    return { type: unknown ? 'info' : 'fail', error: `${error.code}: ${error.message}` };
  }
  return { type: 'info', error: error instanceof Error ? error.message : String(error) };
}

/**
 * How a failed operation of the lock workload (linearizability) completes. The client goes on
 * with a try-acquire or a release after it rejected: it gives back in the background a grant that
 * arrived too late or whose reply was lost, and retries a failed release after reconnecting,
 * while the lease could still last. So an UNAVAILABLE of either may still take effect later, and
 * is unknown (`info`) whether or not it says `indeterminate`. A failed read changed nothing.
 */
export function lockCompletionOf(f: LockOpName, error: unknown): { type: Phase; error: string } {
  const completion = completionOf(error);
  if (f !== 'get' && isDlmError(error, 'UNAVAILABLE')) return { ...completion, type: 'info' };
  return completion;
}

/** What a workload process does: acquire → read → (extend) → write → release. */
export type OpName = 'acquire' | 'read' | 'write' | 'extend' | 'release';

export interface OpEvent {
  kind: 'op';
  t: number;
  proc: string;
  /** Per process; an operation's invoke and completion share it. */
  op: number;
  f: OpName;
  type: Phase;
  /** The lock name, which is also the resource key. */
  name: string;
  /** Fencing token (decimal string): the grant's on acquire ok, the one presented otherwise. */
  token?: string;
  /** acquire/extend ok: the lease length granted. */
  ttlMs?: number;
  /** acquire/extend ok: when the client's local deadline ends (same time line as `t`). */
  deadline?: number;
  /** read ok: the value read; write invoke: the value written. */
  value?: number;
  /** write: the value the write is based on (written = read + 1). */
  read?: number;
  /** acquire: the mode asked for (invoke) and granted (ok). Absent: `exclusive`. */
  mode?: 'exclusive' | 'shared';
  /** acquire in `shared` mode: the most holders at once that the grant agreed to. */
  limit?: number;
  /** acquire (invoke and ok): the lock-delay asked for, when above 0. */
  lockDelayMs?: number;
  /** acquire (invoke): the cap on holding asked for, when asked. */
  maxHoldMs?: number;
  /** release ok: whether the server freed the lock (false: the lease had already ended). */
  released?: boolean;
  /** fail/info: the error code and message. */
  error?: string;
}

/** The client reported a lease lost (its signal aborted other than by a release). */
export interface LostEvent {
  kind: 'lost';
  t: number;
  proc: string;
  name: string;
  token: string;
  reason: string;
}

/** The fenced resource's own log: every read and write it was asked for, in its order. */
export interface ResourceEvent {
  kind: 'resource';
  t: number;
  proc: 'resource';
  f: 'read' | 'write';
  name: string;
  token: string;
  accepted: boolean;
  /** read: the value returned; write: the value written (when accepted). */
  value: number;
  /** The counter before a write. */
  previous?: number;
}

/** A fault the nemesis injected: `start` and `end` share an `id`. */
export interface FaultEvent {
  kind: 'fault';
  t: number;
  proc: 'nemesis';
  id: number;
  nemesis: string;
  phase: 'start' | 'end';
  /** The process or member hit (a worker's proc id, `server`, `n2`, `zk1`, …). */
  target?: string;
  /** For faults on a holder: the lock it held when hit. */
  holding?: { name: string; token: string };
  detail?: string;
}

/** What happened to a workload process: the checker needs its pauses and its death. */
export interface ProcessEvent {
  kind: 'process';
  t: number;
  proc: 'nemesis';
  target: string;
  what: 'start' | 'pause' | 'resume' | 'kill' | 'stop';
}

export type HistoryEvent =
  | OpEvent
  | LostEvent
  | ResourceEvent
  | FaultEvent
  | ProcessEvent
  /** The lock workload's try-acquire / release / get, for the linearizability check. */
  | LockOpEvent;

/** Distributes `Omit` over the union, so each event kind keeps its own fields. */
export type Unstamped<E> = E extends HistoryEvent ? Omit<E, 't' | 'proc'> : never;

export interface HistoryWriter {
  readonly proc: string;
  /** Appends one event, stamped with `monoNow()` unless `t` is given; returns its time. */
  record(event: Unstamped<HistoryEvent>, t?: number): number;
  close(): void;
}

/**
 * Appends events to a JSONL file, one synchronous write per event, so that a process killed
 * with SIGKILL loses nothing it recorded (at most a torn last line, which the reader skips).
 */
export function createHistoryWriter(path: string, proc: string): HistoryWriter {
  const fd = openSync(path, 'a');
  let open = true;
  return {
    proc,
    record(event, t = monoNow()) {
      if (open) writeSync(fd, `${JSON.stringify({ ...event, t, proc })}\n`);
      return t;
    },
    close() {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}

/** Parses one JSONL history file; a torn last line (a process killed mid-write) is skipped. */
export function parseHistory(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      events.push(JSON.parse(line) as HistoryEvent);
    } catch {}
  }
  return events;
}

/** Every `*.jsonl` in `dir`, merged into one history ordered by time. */
export function readHistoryDir(dir: string): HistoryEvent[] {
  const events = readdirSync(dir)
    .filter((file) => file.endsWith('.jsonl'))
    .flatMap((file) => parseHistory(readFileSync(join(dir, file), 'utf8')));
  return mergeHistories(events);
}

/** Orders events by time; ties keep their input order (sort is stable). */
export function mergeHistories(...parts: HistoryEvent[][]): HistoryEvent[] {
  return parts.flat().sort((a, b) => a.t - b.t);
}
