import type { AcquireRequest, Grant, LockConflict } from './backend.js';
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
import { backendPlace } from './queue-positions.js';
import { backoffDelayMs } from './retry.js';
import { MAX_TIMER_MS } from './time.js';
import { renewer, type Wait, Waiters } from './waiters.js';

/**
 * The one wait loop (Curator's `LockInternals.internalLockLoop`): join a queue, look at what is
 * ahead, sleep until something ahead changes or the deadline passes, leave. It runs over a
 * backend's queue driver (`queue-driver.ts`), or over this server's FIFO (`local-queue.ts`);
 * what is the same for every queue lives here once:
 *
 * - the caller's signal, which carries the deadline (the service aborts it when `waitMs` runs
 *   out), and the backend closing (`QueueWaits.close`, or `isClosed` after a sleep);
 * - one join at a time per name, in arrival order, and the registry of this server's waiters,
 *   the name's watch and the wake rules (`waiters.ts`), checked against what each waiter sleeps
 *   on and against what a look returns when the change came during the look (`sleeper.ts`);
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

const loops = new WeakMap<BackendQueue<never>, WaitLoop<never>>();

/** The loop over `queue`: one per queue object, however many services run waits over it. */
export function waitLoopOf<R extends AcquireRequest>(
  queue: BackendQueue<R>,
  backend: string,
): WaitLoop<R> {
  let loop = loops.get(queue) as WaitLoop<R> | undefined;
  if (!loop) {
    loop = new WaitLoop(queue, backend);
    loops.set(queue, loop as WaitLoop<never>);
    queue.attach?.(loop.waits);
  }
  return loop;
}

/** While closing, how often waits still running are woken again. */
const CLOSE_RECHECK_MS = 20;
const LEAVE_RETRY = { initialDelayMs: 250, maxDelayMs: 5_000 };

export class WaitLoop<R extends AcquireRequest = AcquireRequest> {
  private readonly waiters: Waiters;
  private readonly renewals: ReturnType<typeof renewer>;
  private readonly running = new Set<Promise<unknown>>();
  private readonly retries = new Set<Timer>();
  private closing = false;
  /** How the backend reaches the waits (`BackendQueue.attach`). */
  readonly waits: QueueWaits;

  constructor(
    private readonly queue: BackendQueue<R>,
    private readonly backend: string,
  ) {
    this.waiters = new Waiters(queue as BackendQueue<never>);
    this.renewals = renewer(queue as BackendQueue<never>, this.waiters);
    this.waits = {
      report: (name, change) => this.waiters.report(name, change),
      drivers: (name) => this.waiters.drivers(name),
      resync: () => {
        this.renewals.now();
        this.waiters.wakeAll();
      },
      close: () => this.close(),
    };
  }

  /**
   * One wait over the queue, until granted, refused, or `signal` aborts. `onWaiting` is called
   * once, before its first sleep: only then does the request wait (a look that grants at once,
   * on a free lock, was no wait, and is never counted as one). `onPosition`, over a queue with
   * `count`: the wait's 1-based place in the backend's queue, from then on and whenever it
   * changes (read on the changes the queue reports, never on a timer).
   */
  run(
    request: R,
    signal: AbortSignal,
    onWaiting?: () => void,
    onPosition?: (position: number) => void,
  ): Promise<WaitOutcome> {
    const wait = this.wait(request, signal, onWaiting, onPosition);
    const done = () => this.running.delete(wait);
    this.running.add(wait);
    wait.then(done, done);
    return wait;
  }

  /** How many waits of this server are on `name`. */
  waiting(name: string): number {
    return this.waiters.byName.get(name)?.length ?? 0;
  }

  /** The holder's remaining lease as this server's first waiter of `name` last saw it. */
  holderMs(name: string): number | undefined {
    return this.waiters.byName.get(name)?.[0]?.ttlRemainingMs;
  }

  private isClosed(): boolean {
    return this.closing || this.queue.isClosed();
  }

  private closedError(): DlmError {
    return new DlmError('UNAVAILABLE', `acquire: the ${this.backend} backend is closed`);
  }

  private async wait(
    request: R,
    signal: AbortSignal,
    onWaiting: (() => void) | undefined,
    onPosition: ((position: number) => void) | undefined,
  ): Promise<WaitOutcome> {
    if (signal.aborted) return { kind: 'ended' };
    if (this.isClosed()) throw this.closedError();
    const wait = this.waiters.register(request);
    let ended: { outcome: WaitOutcome; entry: string | undefined } | undefined;
    try {
      const driver = this.queue.driver(request, {
        changed: () => wait.sleeper.changed({ what: 'unknown' }, () => true),
      });
      wait.driver = driver;
      const placed = onPosition && this.queue.count && driver.position ? driver : undefined;
      const started = () => {
        onWaiting?.();
        if (!placed) return;
        wait.place = backendPlace((moved) => placed.position!(moved), onPosition!);
        wait.place.read();
      };
      ended = await this.loop(wait, driver, signal, started);
      return ended.outcome;
    } catch (error) {
      throw toUnavailable(error, 'acquire');
    } finally {
      await this.finish(wait, ended);
    }
  }

  /** Look, then sleep on what the look found, until granted, refused or the signal aborts. */
  private async loop(
    wait: Wait,
    driver: QueueDriver,
    signal: AbortSignal,
    onWaiting: (() => void) | undefined,
  ) {
    const { sleeper } = wait;
    let waiting = false;
    while (!signal.aborted) {
      if (this.isClosed()) throw this.closedError();
      const entry = driver.entry();
      const startedAt = this.queue.clock.now();
      const left = entry === undefined ? undefined : sleeper.predecessorLeft();
      // Without a look, what was reported since the wake is checked against it (`missed`).
      const step =
        this.holderThatLeft(wait, left) ??
        (await sleeper.looking(() =>
          entry === undefined ? this.join(wait, driver) : driver.look(left),
        ));
      this.renewals.schedule();
      if (step.kind === 'granted') {
        const sentAt = step.sentAt ?? startedAt;
        return { outcome: { kind: 'granted', grant: step.grant, sentAt } as WaitOutcome, entry };
      }
      if (step.kind === 'conflict') return { outcome: step as WaitOutcome, entry: undefined };
      if (step.kind === 'holder') wait.ttlRemainingMs = step.ttlRemainingMs;
      if (step.kind === 'again' || sleeper.missed(step) || signal.aborted) continue;
      if (!waiting) {
        waiting = true;
        onWaiting?.();
      }
      await sleeper.sleep(step, this.wakeAfterMs(step), signal);
      // The signal first: a service that closes aborts its waits (CANCELLED) as it closes.
      if (!signal.aborted && this.isClosed()) throw this.closedError();
    }
    const ended: WaitOutcome = { kind: 'ended', ttlRemainingMs: wait.ttlRemainingMs };
    return { outcome: ended, entry: undefined };
  }

  /** The first join waits for the waits of this server that came before to have joined. */
  private async join(wait: Wait, driver: QueueDriver): Promise<QueueStep> {
    await wait.ready;
    try {
      return await driver.join();
    } finally {
      wait.doneJoining();
    }
  }

  /**
   * When the entry an exclusive waiter slept on left with the lock, it sleeps on that holder
   * without a look. That step reads nothing, so a change reported after the wake (the holder's
   * release, heard in the same breath as its grant) must still count against it: it is not
   * taken inside `looking`, which forgets what came before the look.
   */
  private holderThatLeft(wait: Wait, left: QueueChange | undefined): QueueStep | undefined {
    if (left?.grantedMs === undefined || wait.shared) return undefined;
    return { kind: 'holder', ttlRemainingMs: left.grantedMs };
  }

  private wakeAfterMs(step: QueueSleep): number | undefined {
    const { queue } = this;
    if (step.kind === 'holder') {
      const ttl = step.ttlRemainingMs;
      if (ttl === undefined) return queue.unknownHolderMs;
      return Math.min(Math.max(0, ttl) + queue.expirySlackMs, MAX_TIMER_MS);
    }
    if (step.endsInMs === undefined) return undefined;
    return Math.min(Math.max(0, step.endsInMs) + (queue.aheadSlackMs ?? 0), MAX_TIMER_MS);
  }

  /** The wait is over: out of the registry and, where it is still queued, out of the queue. */
  private async finish(
    wait: Wait,
    ended: { outcome: WaitOutcome; entry: string | undefined } | undefined,
  ): Promise<void> {
    wait.place?.stop();
    wait.doneJoining();
    wait.sleeper.end();
    wait.driver?.stop();
    this.waiters.unregister(wait);
    const { outcome, entry: left } = ended ?? {};
    if (outcome?.kind === 'granted' && left !== undefined) {
      const grantedMs = outcome.grant.ttlMs;
      this.waiters.report(wait.name, { what: 'entry-left', key: left, grantedMs });
    }
    const entry = wait.driver?.entry();
    // Leaving is best effort: a failure neither changes the outcome nor hides its error.
    if (entry !== undefined) await this.leave(wait.driver!, wait.name, entry);
  }

  /** Leaves the queue (retried later when the store does not answer), then tells the next. */
  private async leave(driver: QueueDriver, name: string, entry: string, retry = 0): Promise<void> {
    try {
      await driver.leave(entry);
      this.waiters.report(name, { what: 'entry-left', key: entry });
    } catch {
      if (this.isClosed()) return;
      // Until it is gone it holds up the queue behind it: keep trying while the backend runs.
      const timer = this.queue.clock.setTimer(
        () => {
          this.retries.delete(timer);
          if (!this.isClosed()) void this.leave(driver, name, entry, retry + 1);
        },
        backoffDelayMs(LEAVE_RETRY, retry + 1),
      );
      this.retries.add(timer);
    }
  }

  /** Every wait ends (the backend is closed) and leaves; resolves once all have left. */
  private async close(): Promise<void> {
    this.closing = true;
    // A waiter that was looking when woken goes to sleep after: wake again until all are out.
    while (this.running.size > 0) {
      this.waiters.wakeAll();
      await this.settledOrLater([...this.running], CLOSE_RECHECK_MS);
    }
    this.renewals.stop();
    for (const timer of this.retries) timer.cancel();
    this.retries.clear();
  }

  /** Resolves once every one of `runs` has settled, or after `delayMs`, whichever comes first. */
  private settledOrLater(runs: Promise<unknown>[], delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.queue.clock.setTimer(resolve, delayMs);
      void Promise.allSettled(runs).then(() => {
        timer.cancel();
        resolve();
      });
    });
  }
}
