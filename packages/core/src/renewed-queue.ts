import type { AcquireRequest, AcquireResult, QueuedAcquireRequest } from './backend.js';
import type { Clock, Timer } from './clock.js';
import {
  createFairQueue,
  type FairQueueDriver,
  type FairQueueOptions,
  type QueueStep,
  type QueueWatcher,
} from './fair-queue.js';

/**
 * The fair queue of a backend whose queue entries live only while their dlm server renews them
 * (PostgreSQL's waiters table, Redis's sorted sets), written once: core's wait loop
 * (`createFairQueue`), this server's entries renewed every third of `waiterTtlMs` while there
 * are any, and a close that waits until every running wait has left. What differs per backend
 * (how the entries are renewed, what a waiter joins and looks at) comes in as callbacks.
 *
 * An entry no longer renewed (its waiter left, or this server died) ends within `waiterTtlMs`
 * on the backend's clock; the backend's renewal must never bring back one that already ended
 * (others may have passed it).
 */

/** What a join or look found ahead of a waiter's entry (see `QueueEntry.sleepOn`). */
export interface FoundAhead {
  /** The entry just ahead, and how long until it ends unless renewed (backend's clock). */
  ahead?: { id: string; endsInMs: number } | undefined;
  /** No entry ahead: the holder's remaining lease, if the name is held. */
  holderMs?: number | undefined;
}

/** One waiter's entry in the backend's queue, as its driver records it. */
export interface QueueEntry {
  /** The entry's id while queued. */
  readonly id: string | undefined;
  /** The waiter's entry is now `id` (undefined: none); this server renews it while it is set. */
  set(id: string | undefined): void;
  /** Whether it is the oldest of this server's entries for its name (the first one added). */
  first(): boolean;
  /**
   * The step to sleep on for what was found ahead: the entry ahead, else the holder, else look
   * again. On an entry ahead, a timer `aheadSlackMs` after its end wakes the waiter to look
   * again, in case nobody says it went (its server died); the step before's timer is cancelled.
   */
  sleepOn(found: FoundAhead): QueueStep;
  /** The entry is leaving the queue: no longer renewed, it is unset. Returns the id it had. */
  take(): string | undefined;
}

/**
 * A backend's driver over a `QueueEntry`: the queue knows it is queued while its entry is set,
 * and stopping it also cancels the entry's timer.
 */
export type RenewedQueueDriver = Omit<FairQueueDriver, 'queued'>;

export interface RenewedFairQueueOptions extends Omit<FairQueueOptions, 'driver'> {
  /** How long an entry stays live without its server's renewal. */
  waiterTtlMs: number;
  /**
   * Renews this server's entries, per name in the order they were added. The map is the live
   * one: read it when the renewal is sent. A failure is ignored (the next renewal follows; an
   * entry not renewed in time ends, and its waiter joins again).
   */
  renew(byName: ReadonlyMap<string, readonly string[]>): Promise<unknown>;
  /** After an entry ahead should have ended, look this much later (its end is the backend's). */
  aheadSlackMs: number;
  /** A driver for one request, recording its entry in `entry` while it is queued. */
  driver(request: AcquireRequest, watcher: QueueWatcher, entry: QueueEntry): RenewedQueueDriver;
  /**
   * Runs one wait, given the queue's (`queued`); by default, just that. A backend may try
   * something cheaper first (Redis: a plain try-lock when no wait of this server is on the name).
   */
  acquire?(
    request: QueuedAcquireRequest,
    queued: (request: QueuedAcquireRequest) => Promise<AcquireResult>,
  ): Promise<AcquireResult>;
}

export interface RenewedFairQueue {
  acquireQueued(request: QueuedAcquireRequest): Promise<AcquireResult>;
  /** The backend's event stream came back: renew now, and every sleeping waiter looks again. */
  resync(): void;
  /** Wakes every waiter to find the backend closed, waits until they have left, stops renewing. */
  close(): Promise<void>;
}

/** While closing, how often waiters still running are woken again. */
const CLOSE_RECHECK_MS = 20;

/**
 * A fair queue over entries this server keeps alive.
 *
 * @example
 * const queue = createRenewedFairQueue({ clock, backend: 'Redis', isClosed, expirySlackMs: 250,
 *   aheadSlackMs: 50, waiterTtlMs, renew: (byName) => renewAll(byName),
 *   driver: (request, watcher, entry) => new RedisWaiter(context, entry, request, watcher) });
 * const backend = { ...primitives, acquireQueued: queue.acquireQueued, close: queue.close };
 */
export function createRenewedFairQueue(options: RenewedFairQueueOptions): RenewedFairQueue {
  const { clock, driver, acquire } = options;
  const entries = renewedEntries(options);
  const queue = createFairQueue({
    clock,
    backend: options.backend,
    isClosed: options.isClosed,
    expirySlackMs: options.expirySlackMs,
    driver: (request, watcher): FairQueueDriver => {
      const entry = queueEntry(options, entries, request.name, watcher);
      const own = driver(request, watcher, entry);
      return {
        queued: () => entry.id !== undefined,
        join: () => own.join(),
        look: () => own.look(),
        leave: () => own.leave(),
        stop() {
          own.stop();
          entry.stop();
        },
      };
    },
  });
  const running = new Set<Promise<unknown>>();
  return {
    acquireQueued(request) {
      const run = acquire ? acquire(request, queue.acquireQueued) : queue.acquireQueued(request);
      const done = () => running.delete(run);
      running.add(run);
      run.then(done, done);
      return run;
    },
    resync() {
      entries.renewNow();
      queue.wakeAll();
    },
    async close() {
      // A waiter that was looking when woken goes to sleep after: wake again until all are out.
      while (running.size > 0) {
        queue.wakeAll();
        await settledOrLater(clock, [...running], CLOSE_RECHECK_MS);
      }
      entries.stop();
    },
  };
}

/** Resolves once every one of `runs` has settled, or after `delayMs`, whichever comes first. */
function settledOrLater(clock: Clock, runs: Promise<unknown>[], delayMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = clock.setTimer(resolve, delayMs);
    void Promise.allSettled(runs).then(() => {
      timer.cancel();
      resolve();
    });
  });
}

/** This server's entries in the backend's queue. */
interface RenewedEntries {
  add(id: string, name: string): void;
  /** Whether `id` is the oldest of this server's entries for `name` (the first added). */
  first(name: string, id: string): boolean;
  delete(id: string, name: string): void;
  /** Renew at once (the backend's connection is new), when there are entries. */
  renewNow(): void;
  stop(): void;
}

/** A waiter's entry: its id among this server's entries, and the timer at the entry ahead's end. */
function queueEntry(
  { clock, aheadSlackMs }: Pick<RenewedFairQueueOptions, 'clock' | 'aheadSlackMs'>,
  entries: RenewedEntries,
  name: string,
  watcher: QueueWatcher,
): QueueEntry & { stop(): void } {
  let id: string | undefined;
  let aheadTimer: Timer | undefined;
  const set = (next: string | undefined) => {
    if (id !== undefined) entries.delete(id, name);
    id = next;
    if (next !== undefined) entries.add(next, name);
  };
  return {
    get id() {
      return id;
    },
    set,
    first: () => id !== undefined && entries.first(name, id),
    sleepOn({ ahead, holderMs }) {
      aheadTimer?.cancel();
      aheadTimer = undefined;
      if (ahead) {
        const key = ahead.id;
        // Renewed by a live server before then: the look finds it live and we sleep on.
        aheadTimer = clock.setTimer(
          () => watcher.changed((step) => step.kind === 'predecessor' && step.key === key),
          ahead.endsInMs + aheadSlackMs,
        );
        return { kind: 'predecessor', key };
      }
      if (holderMs !== undefined) return { kind: 'holder', ttlRemainingMs: holderMs };
      return { kind: 'again' };
    },
    take() {
      const had = id;
      set(undefined);
      return had;
    },
    stop() {
      aheadTimer?.cancel();
    },
  };
}

/** This server's entries, renewed every third of `waiterTtlMs` while there are any. */
function renewedEntries({
  clock,
  waiterTtlMs,
  renew,
}: Pick<RenewedFairQueueOptions, 'clock' | 'waiterTtlMs' | 'renew'>): RenewedEntries {
  const byName = new Map<string, string[]>();
  let timer: Timer | undefined;
  let stopped = false;
  const renewAll = () => renew(byName).catch(() => undefined);
  const schedule = () => {
    if (timer || stopped || byName.size === 0) return;
    timer = clock.setTimer(
      () => {
        void renewAll().finally(() => {
          timer = undefined;
          schedule();
        });
      },
      Math.max(1, Math.floor(waiterTtlMs / 3)),
    );
  };
  return {
    add(id, name) {
      const mine = byName.get(name) ?? [];
      mine.push(id);
      byName.set(name, mine);
      schedule();
    },
    first: (name, id) => byName.get(name)?.[0] === id,
    delete(id, name) {
      const mine = byName.get(name);
      const at = mine?.indexOf(id) ?? -1;
      if (mine && at >= 0) mine.splice(at, 1);
      if (mine?.length === 0) byName.delete(name);
    },
    renewNow() {
      if (byName.size > 0 && !stopped) void renewAll();
    },
    stop() {
      stopped = true;
      timer?.cancel();
    },
  };
}
