import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { AcquireOptions, DlmClient, Lease, LeaseCallOptions } from '@dlm/client';
import {
  type CheckResult,
  checkHistory,
  checkLinearizability,
  completionOf,
  createHistoryWriter,
  type HistoryEvent,
  type HistoryWriter,
  type LinearizabilityResult,
  type LockOpEvent,
  lockCompletionOf,
  monoNow,
  type OpEvent,
  readHistoryDir,
  type Unstamped,
} from '@dlm/faults';
import { tempDir } from '@dlm/test-services';

/**
 * The clients' operations in the load-balancer scenarios, recorded as the fault harness's
 * history (`@dlm/faults`): each acquire, extend and release as an operation (`op` events, for
 * `checkHistory`'s S2, S4, S5 and S6) and each acquire and release again as a lock operation
 * (`lock` events, for `checkLinearizability`), plus the leases the clients report lost. One
 * JSONL file, written as the fault harness's processes write theirs, read back by the harness's
 * own reader.
 */
export interface LbHistory {
  /** `client.acquire(name, options)` by `proc` (one actor: a client, or a client's waiter). */
  acquire(proc: string, client: DlmClient, name: string, options: AcquireOptions): Promise<Lease>;
  extend(lease: Lease, ttlMs: number, options?: LeaseCallOptions): Promise<void>;
  release(lease: Lease, options?: LeaseCallOptions): Promise<boolean>;
  /** Leases reported lost so far. */
  readonly lost: number;
  /** Reads the file back and runs both checkers over it. */
  check(): LbVerdict;
  /** Removes the file. */
  close(): void;
}

export interface LbVerdict {
  events: number;
  checker: CheckResult;
  linearizability: LinearizabilityResult;
  /** The checker's violations and the names found not linearizable. */
  violations: number;
  /** One line per violation (empty when there are none). */
  messages: string[];
}

/** The linearizability check's bounds for leases of at least `minTtlMs` (the shortest asked for). */
export function checkOptions(minTtlMs: number, requestTimeoutMs: number) {
  return {
    // A lease lasts at least what was asked, less a margin for clocks and the request's flight.
    expiryAfterMs: minTtlMs * 0.8,
    // A reply that never came may still have taken effect until the request timed out and a
    // lease it granted could have run out.
    unknownHorizonMs: requestTimeoutMs + minTtlMs,
    // The fault harness's properties: L1 and L4 look at killed or paused holders, which these
    // scenarios do not have (servers die, holders live), so the bounds only need to be sane.
    l1BoundMs: 5_000,
    l4BoundMs: 1_000,
  };
}

/** Runs the fault harness's checkers over a merged history. */
export function checkLbHistory(
  events: HistoryEvent[],
  options: ReturnType<typeof checkOptions>,
): LbVerdict {
  const checker = checkHistory(events, options);
  const lockEvents = events.filter((event): event is LockOpEvent => event.kind === 'lock');
  const linearizability = checkLinearizability(lockEvents, options);
  const messages = [
    ...checker.violations.map((v) => `${v.property} ${v.name}: ${v.message}`),
    ...linearizability.names
      .filter((name) => name.verdict === 'not-linearizable')
      .map((name) => `not linearizable ${name.name}: ${name.message}`),
  ];
  return {
    events: events.length,
    checker,
    linearizability,
    violations: checker.violations.length + linearizability.violations,
    messages,
  };
}

/** What a completed operation adds to its `ok` event. */
type Done = Pick<OpEvent, 'token' | 'ttlMs' | 'deadline' | 'released'>;

/** Writes events into `dir`, one file per actor, as each of the harness's processes writes its own. */
function historyFiles(dir: string) {
  const writers = new Map<string, HistoryWriter>();
  let seq = 0;

  function record(proc: string, event: Unstamped<HistoryEvent>): void {
    let writer = writers.get(proc);
    if (!writer) {
      writer = createHistoryWriter(join(dir, `${proc}.jsonl`), proc);
      writers.set(proc, writer);
    }
    writer.record(event);
  }

  /** Records `call` as an operation; an acquire or release also as a lock operation. */
  async function run<T>(
    proc: string,
    f: 'acquire' | 'extend' | 'release',
    base: { name: string; token?: string },
    call: () => Promise<T>,
    fields: (result: T) => Done,
  ): Promise<T> {
    const op = ++seq;
    const lockF = f === 'extend' ? undefined : f;
    record(proc, { kind: 'op', op, f, type: 'invoke', ...base });
    if (lockF) record(proc, { kind: 'lock', op, f: lockF, type: 'invoke', ...base });
    try {
      const result = await call();
      const done = fields(result);
      record(proc, { kind: 'op', op, f, type: 'ok', ...base, ...done });
      if (lockF) record(proc, { kind: 'lock', op, f: lockF, type: 'ok', ...base, ...done });
      return result;
    } catch (error) {
      record(proc, { kind: 'op', op, f, ...base, ...completionOf(error) });
      if (lockF)
        record(proc, { kind: 'lock', op, f: lockF, ...base, ...lockCompletionOf(lockF, error) });
      throw error;
    }
  }

  const closeAll = () => {
    for (const writer of writers.values()) writer.close();
  };
  return { record, run, closeAll };
}

/** Records into a fresh file under a temp dir; `minTtlMs` is the shortest lease the run asks for. */
export function lbHistory(minTtlMs: number, requestTimeoutMs: number): LbHistory {
  const dir = tempDir('lb-history');
  const { record, run, closeAll } = historyFiles(dir);
  const owners = new WeakMap<Lease, string>();
  let lost = 0;

  const granted = (lease: Lease) => ({
    token: lease.token.toString(),
    ttlMs: lease.ttlMs,
    deadline: monoNow() + lease.remainingMs(),
  });
  /** Records `call` on `lease` as an operation of the actor that acquired it. */
  const onLease = <T>(
    lease: Lease,
    f: 'extend' | 'release',
    call: () => Promise<T>,
    fields: (result: T) => Done,
  ) =>
    run(
      owners.get(lease) ?? 'unknown',
      f,
      { name: lease.name, token: lease.token.toString() },
      call,
      fields,
    );

  return {
    async acquire(proc, client, name, options) {
      const lease = await run(
        proc,
        'acquire',
        { name },
        () => client.acquire(name, options),
        granted,
      );
      owners.set(lease, proc);
      lease.signal.addEventListener('abort', () => {
        if (lease.lost === undefined) return;
        lost += 1;
        record(proc, { kind: 'lost', name, token: lease.token.toString(), reason: lease.lost });
      });
      return lease;
    },
    extend(lease, ttlMs, options) {
      return onLease(
        lease,
        'extend',
        () => lease.extend(ttlMs, options),
        () => granted(lease),
      );
    },
    release(lease, options) {
      return onLease(
        lease,
        'release',
        () => lease.release(options),
        (released) => ({ released }),
      );
    },
    get lost() {
      return lost;
    },
    check() {
      closeAll();
      return checkLbHistory(readHistoryDir(dir), checkOptions(minTtlMs, requestTimeoutMs));
    },
    close() {
      closeAll();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
