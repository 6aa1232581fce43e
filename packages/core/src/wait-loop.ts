import type { AcquireRequest, Grant, LockConflict, Unsubscribe } from './backend.js';
import type { Timer } from './clock.js';
import { DlmError, toUnavailable } from './errors.js';
import type {
  BackendQueue,
  QueueChange,
  QueueDriver,
  QueueSleep,
  QueueStep,
  QueueWaits,
} from './queue-driver.js';
import { backoffDelayMs } from './retry.js';
import { MAX_TIMER_MS } from './time.js';

/**
 * The one wait loop (Curator's `LockInternals.internalLockLoop`): join a queue, look at what is
 * ahead, sleep until something ahead changes or the deadline passes, leave. It runs over a
 * backend's queue driver (`queue-driver.ts`), or over this server's FIFO (`local-queue.ts`);
 * what is the same for every queue lives here once:
 *
 * - the caller's signal, which carries the deadline (the service aborts it when `waitMs` runs
 *   out), and the backend closing (`QueueWaits.close`, or `isClosed` after a sleep);
 * - the registry of this server's waiters, per name in arrival order: one join at a time per
 *   name, in that order; `QueueWaits.drivers`; the name's watch, open while anyone waits;
 * - the wake rules (`QueueChange`), checked against what each waiter sleeps on, and against
 *   what a look returns when the change came during the look;
 * - renewing this server's entries (`BackendQueue.renewal`) every third of their life;
 * - leaving: on every path, retried later while the backend runs when the store did not answer,
 *   and told to this server's waiter behind at once (with the grant's lease when it left with
 *   the lock, so an exclusive waiter behind sleeps on that holder without asking).
 */

/** How a wait in the loop ended. */
export type WaitOutcome =
  /** `sentAt`: when the grant's write was sent, on the queue's clock (the lease counts from it). */
  | { kind: 'granted'; grant: Grant; sentAt: number }
  | { kind: 'conflict'; conflict: LockConflict }
  /** The signal aborted first; `ttlRemainingMs`: the holder's lease left when last seen. */
  | { kind: 'ended'; ttlRemainingMs?: number | undefined };

export interface WaitLoop<R extends AcquireRequest = AcquireRequest> {
  run(request: R, signal: AbortSignal): Promise<WaitOutcome>;
  /** How many waits of this server are on `name`. */
  waiting(name: string): number;
  /** The holder's remaining lease as this server's first waiter of `name` last saw it. */
  holderMs(name: string): number | undefined;
  readonly waits: QueueWaits;
}

const loops = new WeakMap<BackendQueue<never>, WaitLoop<never>>();

/** The loop over `queue`: one per queue, however many services run waits over it. */
export function waitLoopOf<R extends AcquireRequest>(
  queue: BackendQueue<R>,
  backend: string,
): WaitLoop<R> {
  let loop = loops.get(queue) as WaitLoop<R> | undefined;
  if (!loop) {
    loop = createWaitLoop(queue, backend);
    loops.set(queue, loop as WaitLoop<never>);
    queue.attach?.(loop.waits);
  }
  return loop;
}

/** One running wait: its driver, its sleep, and its turn to join. */
interface Wait {
  readonly name: string;
  readonly shared: boolean;
  driver: QueueDriver | undefined;
  readonly sleeper: Sleeper;
  /** Resolves once the waits of this server that came before are done joining. */
  readonly ready: Promise<void>;
  /** Resolves once this wait is done joining (or over). */
  readonly joined: Promise<void>;
  doneJoining(): void;
  ttlRemainingMs: number | undefined;
}

/** While closing, how often waits still running are woken again. */
const CLOSE_RECHECK_MS = 20;
const LEAVE_RETRY = { initialDelayMs: 250, maxDelayMs: 5_000 };

function createWaitLoop<R extends AcquireRequest>(
  queue: BackendQueue<R>,
  backend: string,
): WaitLoop<R> {
  const { clock } = queue;
  const byName = new Map<string, Wait[]>();
  const watches = new Map<string, Unsubscribe>();
  const running = new Set<Promise<unknown>>();
  const retries = new Set<Timer>();
  let closing = false;
  const isClosed = () => closing || queue.isClosed();
  const closedError = () =>
    new DlmError('UNAVAILABLE', `acquire: the ${backend} backend is closed`);
  const renewals = renewer(queue, () => byName);

  function register(request: R): Wait {
    const waits = byName.get(request.name) ?? [];
    const previous = waits.at(-1);
    let doneJoining: () => void = () => {};
    const joined = new Promise<void>((resolve) => {
      doneJoining = resolve;
    });
    const wait: Wait = {
      name: request.name,
      shared: request.mode === 'shared',
      driver: undefined,
      sleeper: createSleeper(queue),
      ready: previous ? previous.joined : Promise.resolve(),
      joined,
      doneJoining,
      ttlRemainingMs: undefined,
    };
    waits.push(wait);
    if (waits.length === 1) {
      byName.set(request.name, waits);
      const unsubscribe = queue.watch?.(request.name, (change) => report(request.name, change));
      if (unsubscribe) watches.set(request.name, unsubscribe);
    }
    return wait;
  }

  function unregister(wait: Wait): void {
    const waits = byName.get(wait.name);
    const at = waits?.indexOf(wait) ?? -1;
    if (!waits || at < 0) return;
    waits.splice(at, 1);
    if (waits.length > 0) return;
    byName.delete(wait.name);
    watches.get(wait.name)?.();
    watches.delete(wait.name);
  }

  /** The wake rules: each waiter of `name` hears `change` if it concerns what it sleeps on. */
  function report(name: string, change: QueueChange): void {
    const waits = byName.get(name);
    if (!waits) return;
    // This server's oldest queued waiter also looks on a holder's end when entries live only
    // while renewed: if the entry it sleeps on belongs to a server that died, nobody else would
    // tell it before that entry's end. One look per server per end at most.
    const first = queue.renewal && waits.find((wait) => wait.driver?.entry() !== undefined);
    for (const wait of [...waits]) {
      const entry = wait.driver?.entry();
      wait.sleeper.changed(change, (step) => {
        if (change.what === 'unknown') return true;
        if (change.what === 'holder-ended') {
          return step.kind === 'holder' || (wait === first && step.kind === 'predecessor');
        }
        return (
          change.key === undefined ||
          change.key === entry ||
          (step.kind === 'predecessor' && step.key === change.key) ||
          (wait.shared && step.kind === 'holder')
        );
      });
    }
  }

  async function joinInTurn(wait: Wait, driver: QueueDriver): Promise<QueueStep> {
    await wait.ready;
    try {
      return await driver.join();
    } finally {
      wait.doneJoining();
    }
  }

  /** A look, unless the entry I slept on left with the lock: then I sleep on that holder. */
  function look(wait: Wait, driver: QueueDriver): Promise<QueueStep> | QueueStep {
    const left = wait.sleeper.predecessorLeft();
    if (left?.grantedMs !== undefined && !wait.shared) {
      return { kind: 'holder', ttlRemainingMs: left.grantedMs };
    }
    return driver.look(left);
  }

  function wakeAfterMs(step: QueueSleep): number | undefined {
    if (step.kind === 'holder') {
      const ttl = step.ttlRemainingMs;
      if (ttl === undefined) return queue.unknownHolderMs;
      return Math.min(Math.max(0, ttl) + queue.expirySlackMs, MAX_TIMER_MS);
    }
    if (step.endsInMs === undefined) return undefined;
    return Math.min(Math.max(0, step.endsInMs) + (queue.aheadSlackMs ?? 0), MAX_TIMER_MS);
  }

  /** Look, then sleep on what the look found, until granted, refused or the signal aborts. */
  async function loop(wait: Wait, driver: QueueDriver, signal: AbortSignal) {
    const { sleeper } = wait;
    while (!signal.aborted) {
      if (isClosed()) throw closedError();
      const entry = driver.entry();
      const startedAt = clock.now();
      const step = await sleeper.looking(() =>
        entry === undefined ? joinInTurn(wait, driver) : look(wait, driver),
      );
      renewals.schedule();
      if (step.kind === 'granted') {
        const granted = { kind: 'granted', grant: step.grant, sentAt: step.sentAt ?? startedAt };
        return { outcome: granted as WaitOutcome, entry };
      }
      if (step.kind === 'conflict') return { outcome: step as WaitOutcome, entry: undefined };
      if (step.kind === 'holder') wait.ttlRemainingMs = step.ttlRemainingMs;
      if (step.kind === 'again' || sleeper.missed(step) || signal.aborted) continue;
      await sleeper.sleep(step, wakeAfterMs(step), signal);
      // The signal first: a service that closes aborts its waits (CANCELLED) as it closes.
      if (!signal.aborted && isClosed()) throw closedError();
    }
    const ended: WaitOutcome = { kind: 'ended', ttlRemainingMs: wait.ttlRemainingMs };
    return { outcome: ended, entry: undefined };
  }

  /** Leaves the queue (retried later when the store does not answer), then tells the next. */
  async function leave(driver: QueueDriver, name: string, entry: string, retry = 0) {
    try {
      await driver.leave(entry);
      report(name, { what: 'entry-left', key: entry });
    } catch {
      if (isClosed()) return;
      // Until it is gone it holds up the queue behind it: keep trying while the backend runs.
      const timer = clock.setTimer(
        () => {
          retries.delete(timer);
          if (!isClosed()) void leave(driver, name, entry, retry + 1);
        },
        backoffDelayMs(LEAVE_RETRY, retry + 1),
      );
      retries.add(timer);
    }
  }

  async function run(request: R, signal: AbortSignal): Promise<WaitOutcome> {
    if (signal.aborted) return { kind: 'ended' };
    if (isClosed()) throw closedError();
    const wait = register(request);
    let left: string | undefined;
    let outcome: WaitOutcome | undefined;
    try {
      const driver = queue.driver(request, {
        changed: () => wait.sleeper.changed({ what: 'unknown' }, () => true),
      });
      wait.driver = driver;
      ({ outcome, entry: left } = await loop(wait, driver, signal));
      return outcome;
    } catch (error) {
      throw toUnavailable(error, 'acquire');
    } finally {
      wait.doneJoining();
      wait.sleeper.end();
      wait.driver?.stop();
      unregister(wait);
      const entry = wait.driver?.entry();
      if (outcome?.kind === 'granted' && left !== undefined) {
        report(request.name, { what: 'entry-left', key: left, grantedMs: outcome.grant.ttlMs });
      }
      // Leaving is best effort: a failure neither changes the outcome nor hides its error.
      if (entry !== undefined) await leave(wait.driver!, request.name, entry);
    }
  }

  const waits: QueueWaits = {
    report,
    drivers: (name) =>
      (byName.get(name) ?? []).flatMap((wait) => (wait.driver ? [wait.driver] : [])),
    resync() {
      renewals.now();
      wakeAll();
    },
    async close() {
      closing = true;
      // A waiter that was looking when woken goes to sleep after: wake again until all are out.
      while (running.size > 0) {
        wakeAll();
        await settledOrLater([...running], CLOSE_RECHECK_MS);
      }
      renewals.stop();
      for (const timer of retries) timer.cancel();
      retries.clear();
    },
  };

  function wakeAll(): void {
    for (const waitsOfName of byName.values()) for (const wait of waitsOfName) wait.sleeper.wake();
  }

  /** Resolves once every one of `runs` has settled, or after `delayMs`, whichever comes first. */
  function settledOrLater(runs: Promise<unknown>[], delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = clock.setTimer(resolve, delayMs);
      void Promise.allSettled(runs).then(() => {
        timer.cancel();
        resolve();
      });
    });
  }

  return {
    run(request, signal) {
      const wait = run(request, signal);
      const done = () => running.delete(wait);
      running.add(wait);
      wait.then(done, done);
      return wait;
    },
    waiting: (name) => byName.get(name)?.length ?? 0,
    holderMs: (name) => byName.get(name)?.[0]?.ttlRemainingMs,
    waits,
  };
}

/** This server's entries renewed every third of their life, while there are any. */
function renewer(queue: BackendQueue<never>, registry: () => Map<string, Wait[]>) {
  const { renewal, clock } = queue;
  let timer: Timer | undefined;
  let stopped = false;
  const entries = () => {
    const byName = new Map<string, string[]>();
    for (const [name, waits] of registry()) {
      const ids = waits.flatMap((wait) => wait.driver?.entry() ?? []);
      if (ids.length > 0) byName.set(name, ids);
    }
    return byName;
  };
  const renewAll = (byName: Map<string, string[]>) => renewal!.renew(byName).catch(() => undefined);
  const schedule = (): void => {
    if (!renewal || timer || stopped || entries().size === 0) return;
    timer = clock.setTimer(
      () => {
        const byName = entries();
        if (byName.size === 0) {
          timer = undefined;
          return;
        }
        void renewAll(byName).finally(() => {
          timer = undefined;
          schedule();
        });
      },
      Math.max(1, Math.floor(renewal.waiterTtlMs / 3)),
    );
  };
  return {
    schedule,
    now() {
      const byName = entries();
      if (renewal && !stopped && byName.size > 0) void renewAll(byName);
    },
    stop() {
      stopped = true;
      timer?.cancel();
    },
  };
}

/** One waiter's sleep/wake state: what it sleeps on, and what changed during a look. */
interface Sleeper {
  /** A change concerning the waiter if `affects` holds for the step it sleeps on (or finds). */
  changed(change: QueueChange, affects: (step: QueueSleep) => boolean): void;
  /** Wakes it, whatever it sleeps on (a new connection, a close). */
  wake(): void;
  /** Runs one look; changes reported meanwhile are checked against its step (`missed`). */
  looking(look: () => Promise<QueueStep> | QueueStep): Promise<QueueStep>;
  /** Whether a change reported during the last look concerns `step`. */
  missed(step: QueueSleep): boolean;
  /** The change that woke it from sleeping on the entry ahead: that entry left (once). */
  predecessorLeft(): QueueChange | undefined;
  /** Sleeps until woken, aborted, or `wakeAfterMs` passed. */
  sleep(step: QueueSleep, wakeAfterMs: number | undefined, signal: AbortSignal): Promise<void>;
  /** The wait is over: later changes (a one-shot watch firing late) are ignored. */
  end(): void;
}

function createSleeper({ clock }: BackendQueue<never>): Sleeper {
  let sleepingOn: QueueSleep | undefined;
  let wake: () => void = () => {};
  let left: QueueChange | undefined;
  const seen: ((step: QueueSleep) => boolean)[] = [];
  let ended = false;
  return {
    changed(change, affects) {
      const step = sleepingOn;
      if (ended) return;
      if (step === undefined) seen.push(affects);
      else if (affects(step)) {
        const fromAhead = change.what === 'entry-left' && step.kind === 'predecessor';
        left =
          fromAhead && change.key !== undefined && change.key === step.key ? change : undefined;
        wake();
      }
    },
    wake: () => wake(),
    async looking(look) {
      seen.length = 0;
      return look();
    },
    missed: (step) => seen.some((affects) => affects(step)),
    predecessorLeft() {
      const change = left;
      left = undefined;
      return change;
    },
    end() {
      ended = true;
      seen.length = 0;
    },
    sleep(step, wakeAfterMs, signal) {
      return new Promise<void>((resolve) => {
        let timer: Timer | undefined;
        const done = () => {
          timer?.cancel();
          signal.removeEventListener('abort', done);
          sleepingOn = undefined;
          wake = () => {};
          resolve();
        };
        sleepingOn = step;
        left = undefined;
        wake = done;
        if (wakeAfterMs !== undefined) timer = clock.setTimer(done, wakeAfterMs);
        signal.addEventListener('abort', done, { once: true });
      });
    },
  };
}
