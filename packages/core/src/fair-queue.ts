import type { AcquireRequest, AcquireResult, LockBackend } from './backend.js';
import type { Clock, Timer } from './clock.js';
import { DlmError, toUnavailable } from './errors.js';
import type { QueueSleep, QueueStep } from './queue-driver.js';
import { MAX_TIMER_MS } from './time.js';

export type { QueueSleep, QueueStep } from './queue-driver.js';

/**
 * The cross-server fair queue, written once: the wait loop of every backend that orders
 * waiters itself (`capabilities.fairQueue`: etcd revisions, ZooKeeper sequence nodes). It is
 * the shape of Apache Curator's `LockInternals.internalLockLoop` with its `LockInternalsDriver`:
 * the loop here owns what is the same everywhere — the caller's AbortSignal (which carries the
 * wait's deadline: core aborts it when `waitMs` runs out), this server's turn-taking among its
 * own waiters, sleeping until the driver reports a change or the holder's lease should be over,
 * the backend closing, leaving the queue on every path, the error mapping — and a driver per
 * backend owns its specifics: join (create my ordered entry), look (my place, the entry ahead,
 * the holder's lease; take the lock when I am first), watch what it sleeps on, leave.
 *
 * Modes. "May I be granted now" is one predicate, in the driver's look, over the request's
 * `mode` and `limit` and each queue entry's mode (Curator's `getsTheLock(children, me,
 * maxLeases)`): exclusive, no entry ahead of mine and no holder; shared, no exclusive entry
 * ahead of mine, no exclusive holder, and fewer than `limit` holders plus shared entries ahead
 * of mine. What a waiter sleeps on stays one step, the nearest thing that blocks it (the entry
 * ahead, the last exclusive entry ahead, or a holder); a look that finds the request can never
 * be granted as asked (the holders agreed on another limit) answers `conflict`. This loop and
 * the driver interface are the same for every mode, and a multi-lock is one such wait per name,
 * in canonical order.
 */

/** How a driver tells the loop that something it watches changed. */
export interface QueueWatcher {
  /**
   * Something changed that matters to a waiter sleeping on a step for which `affects` holds
   * (every step when omitted): wake it. During a look the change may concern what the look
   * read, so the step that look returns is not slept on if `affects` holds for it. Returns the
   * step it woke the waiter from, if it did.
   */
  changed(affects?: (step: QueueSleep) => boolean): QueueSleep | undefined;
}

/** One waiter's side of a backend's queue (Curator's `LockInternalsDriver`), for one request. */
export interface FairQueueDriver {
  /** Whether my entry is in the backend's queue now. */
  queued(): boolean;
  /**
   * Not queued: create my entry (or take a free lock at once). Called for one waiter of this
   * server and name at a time, in the order they called, so FIFO among them survives the time
   * each one's requests take.
   */
  join(): Promise<QueueStep>;
  /**
   * Queued: when I am first and may be granted, take the lock (re-checking that the lease still
   * runs before reporting the grant); else say what to sleep on, watching it.
   */
  look(): Promise<QueueStep>;
  /** Stop watching (the wait is over). */
  stop(): void;
  /** Remove my entry (abort, deadline, error); retrying later is the driver's business. */
  leave(): Promise<void>;
}

export interface FairQueueOptions {
  clock: Clock;
  /** For messages: `acquire: the <backend> backend is closed`. */
  backend: string;
  isClosed(): boolean;
  /** How long after the holder's remaining lease to look again (in case its end went unseen). */
  expirySlackMs: number;
  /** A driver for one request; it subscribes to what it watches and reports to `watcher`. */
  driver(request: AcquireRequest, watcher: QueueWatcher): FairQueueDriver;
}

export interface FairQueue {
  acquireQueued: NonNullable<LockBackend['acquireQueued']>;
  /** Wakes every sleeping waiter: to look again (a new session), or to find the backend closed. */
  wakeAll(): void;
}

/**
 * The fair-queue loop over a backend's driver.
 *
 * @example
 * const queue = createFairQueue({ clock, backend: 'etcd', isClosed, expirySlackMs: 250,
 *   driver: (request, watcher) => new EtcdWaiter(context, request, watcher) });
 * const backend = { ...primitives, acquireQueued: queue.acquireQueued };
 */
export function createFairQueue(options: FairQueueOptions): FairQueue {
  const sleepers = new Set<() => void>();
  const turns = joinTurns();
  const closed = () =>
    new DlmError('UNAVAILABLE', `acquire: the ${options.backend} backend is closed`);

  async function acquireQueued(
    request: AcquireRequest & { signal: AbortSignal },
  ): Promise<AcquireResult> {
    const { signal } = request;
    if (signal.aborted) return { granted: false };
    if (options.isClosed()) throw closed();
    const turn = turns.take(request.name);
    const sleeper = createSleeper(options.clock, sleepers, signal);
    let driver: FairQueueDriver | undefined;
    try {
      driver = options.driver(request, sleeper);
      return await waitLoop(driver, turn, sleeper, signal);
    } catch (error) {
      throw toUnavailable(error, 'acquire');
    } finally {
      // Whatever ended the wait, the next waiter of this server may join.
      turn.done();
      sleeper.end();
      driver?.stop();
      // Leaving is best effort: a failure neither changes the outcome nor hides its error.
      if (driver?.queued()) await driver.leave().catch(() => undefined);
    }
  }

  /** Look, then sleep on what the look found, until granted or the signal aborts. */
  async function waitLoop(
    driver: FairQueueDriver,
    turn: JoinTurn,
    sleeper: Sleeper,
    signal: AbortSignal,
  ): Promise<AcquireResult> {
    let ttlRemainingMs: number | undefined;
    while (!signal.aborted) {
      const step = await sleeper.looking(() =>
        driver.queued() ? driver.look() : join(driver, turn),
      );
      // Granted as the wait ended: core hands the grant back, since nobody will use it.
      if (step.kind === 'granted') return { granted: true, grant: step.grant };
      if (step.kind === 'conflict') return { granted: false, conflict: step.conflict };
      if (step.kind === 'holder') ttlRemainingMs = step.ttlRemainingMs;
      if (step.kind === 'again' || sleeper.missed(step) || signal.aborted) continue;
      const wakeAfterMs =
        step.kind === 'holder' && step.ttlRemainingMs !== undefined
          ? Math.min(step.ttlRemainingMs + options.expirySlackMs, MAX_TIMER_MS)
          : undefined;
      await sleeper.sleep(step, wakeAfterMs);
      if (options.isClosed()) throw closed();
    }
    return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
  }

  async function join(driver: FairQueueDriver, turn: JoinTurn): Promise<QueueStep> {
    await turn.ready;
    try {
      return await driver.join();
    } finally {
      turn.done();
    }
  }

  return {
    acquireQueued,
    wakeAll(): void {
      for (const wake of [...sleepers]) wake();
    },
  };
}

interface JoinTurn {
  /** Resolves when the waiters of this server that called before are done joining. */
  ready: Promise<void>;
  /** This waiter is done joining (idempotent). */
  done(): void;
}

/** Per name, the last waiter of this server still joining the queue. */
function joinTurns() {
  const joining = new Map<string, Promise<void>>();
  return {
    take(name: string): JoinTurn {
      const previous = joining.get(name) ?? Promise.resolve();
      let done: () => void = () => {};
      const finished = new Promise<void>((resolve) => {
        done = resolve;
      });
      const last = previous.then(() => finished);
      joining.set(name, last);
      void last.then(() => {
        if (joining.get(name) === last) joining.delete(name);
      });
      return { ready: previous, done };
    },
  };
}

/** One waiter's sleep/wake state: what it sleeps on, and what changed during a look. */
interface Sleeper extends QueueWatcher {
  /** Runs one look; changes reported meanwhile are checked against its step (`missed`). */
  looking(look: () => Promise<QueueStep>): Promise<QueueStep>;
  /** Whether a change reported during the last look concerns `step`. */
  missed(step: QueueSleep): boolean;
  /** Sleeps until woken, aborted, `wakeAfterMs` passed, or every waiter is woken. */
  sleep(step: QueueSleep, wakeAfterMs: number | undefined): Promise<void>;
  /** The wait is over: later changes (a one-shot watch firing late) are ignored. */
  end(): void;
}

function createSleeper(clock: Clock, sleepers: Set<() => void>, signal: AbortSignal): Sleeper {
  const aborted = new Promise<void>((resolve) => {
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
  let sleepingOn: QueueSleep | undefined;
  let wake: () => void = () => {};
  const seen: ((step: QueueSleep) => boolean)[] = [];
  const always = () => true;
  let ended = false;
  return {
    changed(affects = always) {
      const step = sleepingOn;
      if (ended) return undefined;
      if (step === undefined) seen.push(affects);
      else if (affects(step)) {
        wake();
        return step;
      }
      return undefined;
    },
    async looking(look) {
      seen.length = 0;
      return look();
    },
    missed: (step) => seen.some((affects) => affects(step)),
    end() {
      ended = true;
      seen.length = 0;
    },
    sleep(step, wakeAfterMs) {
      return new Promise<void>((resolve) => {
        let timer: Timer | undefined;
        const done = () => {
          timer?.cancel();
          sleepers.delete(done);
          sleepingOn = undefined;
          wake = () => {};
          resolve();
        };
        sleepingOn = step;
        wake = done;
        sleepers.add(done);
        if (wakeAfterMs !== undefined) timer = clock.setTimer(done, wakeAfterMs);
        void aborted.then(done);
      });
    },
  };
}
