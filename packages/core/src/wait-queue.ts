import type { AcquireResult, Grant } from './backend.js';
import type { Clock, Timer } from './clock.js';
import type { DlmError } from './errors.js';
import { asDlmError, lockHeld } from './lock-errors.js';

/**
 * The wait engine: one lock name's per-server FIFO queue of acquires that asked to wait.
 *
 * Discipline: only the head asks the backend (no thundering herd). When the lock is held, the
 * head sleeps until `wake()` (a backend event: a release or an expiry) or until the holder's
 * remaining lease runs out, whichever comes first; a wait ends at its deadline (LOCK_HELD),
 * when its signal aborts (CANCELLED) or when the service closes. A grant that arrives for a
 * wait that already ended is handed back (`abandoned`).
 *
 * What the engine does not know is the lock itself: `attempt` asks the backend for the head's
 * request, `granted` turns a grant into what the wait resolves with. Modes need nothing more:
 * the backend's `tryAcquire` is the grant predicate (shared: no exclusive holder and fewer
 * than `limit` holders; exclusive: no holder), and after a grant the next head asks at once,
 * so a run of shared heads is granted back to back up to the limit. The first head refused
 * stops the run: an exclusive head behind shared holders sleeps until a release or expiry
 * wakes it, and every wait behind it (shared ones too) waits behind it, which keeps FIFO and
 * starves no writer. An attempt that rejects (a request the holders can never grant as asked,
 * `conflict`: INVALID_PARAMS) ends that head's wait alone, and the next head is served.
 * A multi-lock is one wait per name, taken in one canonical order (`multi-acquire.ts`).
 */
export interface WaitQueueHooks<R, T> {
  /** Asks the backend once for `request`; a rejection ends the head's wait with that error. */
  attempt(request: R): Promise<AcquireResult>;
  /** What the head's wait resolves with once `attempt` granted it. */
  granted(request: R, grant: Grant): T;
  /** A grant for a wait that ended while the attempt was in flight: nobody will use it. */
  abandoned(request: R, grant: Grant): void;
  /**
   * The number of waits that had to wait changed (see `waiting`): one that found the lock free
   * is never counted.
   */
  waitingChanged(waiting: number): void;
  /** The queue stopped serving (empty, or the head is asleep): its owner may drop it. */
  idle(): void;
  /** True once the service closes: the queue serves no more heads. */
  closed(): boolean;
}

export interface WaitOptions {
  /** How long the wait may last (> 0) before it fails with LOCK_HELD. */
  waitMs: number;
  /** Ends the wait early with CANCELLED. */
  signal?: AbortSignal | undefined;
  /** The error an aborted wait fails with. */
  cancelled: () => DlmError;
}

interface Waiter<R, T> {
  request: R;
  resolve: (value: T) => void;
  reject: (error: DlmError) => void;
  settled: boolean;
  deadlineTimer: Timer | undefined;
  detachSignal: () => void;
  /** The holder's remaining lease, last time this waiter asked. */
  ttlRemainingMs: number | undefined;
  /** Counted in `waiting`: the lock was held (by someone else) while this waiter was queued. */
  waiting: boolean;
}

export class WaitQueue<R, T> {
  readonly #waiters: Waiter<R, T>[] = [];
  #pumping = false;
  /** News arrived while the head's attempt was in flight: ask again. */
  #again = false;
  #retryTimer: Timer | undefined;
  #waiting = 0;
  /** The head's last attempt was refused, and none has been granted since: the queue waits. */
  #blocked = false;

  constructor(
    private readonly name: string,
    private readonly clock: Clock,
    /** How long the head sleeps when the backend could not say how long the holder has left. */
    private readonly unknownTtlRetryMs: number,
    private readonly hooks: WaitQueueHooks<R, T>,
  ) {}

  /** Every wait queued, whether or not it has had to wait yet (for bounds and barging). */
  get length(): number {
    return this.#waiters.length;
  }

  /**
   * The waits that have had to wait: queued while the lock was held. A wait whose first attempt
   * is granted (the lock was free) never counts, though it joined the queue to make it.
   */
  get waiting(): number {
    return this.#waiting;
  }

  /** Whether the queue holds waits or is serving one: its name's state must stay. */
  get busy(): boolean {
    return this.#waiters.length > 0 || this.#pumping;
  }

  /** The holder's remaining lease as the head last heard it (a try-lock's LOCK_HELD says it). */
  get headTtlRemainingMs(): number | undefined {
    return this.#waiters[0]?.ttlRemainingMs;
  }

  /** Queues `request` behind the others; resolves when it is granted. */
  enqueue(request: R, options: WaitOptions): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<R, T> = {
        request,
        resolve,
        reject,
        settled: false,
        deadlineTimer: undefined,
        detachSignal: () => {},
        ttlRemainingMs: undefined,
        waiting: false,
      };
      waiter.deadlineTimer = this.clock.setTimer(
        () => this.#deadlinePassed(waiter),
        options.waitMs,
      );
      const { signal } = options;
      if (signal) {
        const onAbort = () => this.#fail(waiter, options.cancelled());
        signal.addEventListener('abort', onAbort, { once: true });
        waiter.detachSignal = () => signal.removeEventListener('abort', onAbort);
      }
      this.#waiters.push(waiter);
      // Behind a head that was refused: this one waits too. Else the head's attempt decides.
      if (this.#blocked) this.#countWaiting([waiter]);
      // Only a new head asks the backend: one behind it changes nothing the head's last answer
      // said (asking again on every arrival cost a backend call each under contention).
      if (this.#waiters.length === 1) void this.#pump();
    });
  }

  /** Something changed on the backend (a release, an expiry): the head asks again now. */
  wake(): void {
    void this.#pump();
  }

  /** Ends every wait with `error` and stops the head's sleep. */
  close(error: DlmError): void {
    for (const waiter of [...this.#waiters]) this.#fail(waiter, error);
    this.stop();
  }

  /** Stops the head's sleep (the queue is being dropped). */
  stop(): void {
    this.#retryTimer?.cancel();
    this.#retryTimer = undefined;
  }

  /**
   * A waiter's deadline passed: it leaves the queue with LOCK_HELD, saying how long the
   * holder's lease had left when it last asked. An attempt in flight for it is then abandoned.
   */
  #deadlinePassed(waiter: Waiter<R, T>): void {
    this.#fail(waiter, lockHeld(this.name, waiter.ttlRemainingMs));
  }

  /** Ends a wait once: out of the queue, its timer and signal detached. False if it had ended. */
  #leave(waiter: Waiter<R, T>): boolean {
    if (waiter.settled) return false;
    waiter.settled = true;
    waiter.deadlineTimer?.cancel();
    waiter.detachSignal();
    const index = this.#waiters.indexOf(waiter);
    if (index >= 0) this.#waiters.splice(index, 1);
    if (waiter.waiting) {
      this.#waiting -= 1;
      this.hooks.waitingChanged(this.#waiting);
    }
    return true;
  }

  /** Counts `waiters` as waiting (those not counted yet). */
  #countWaiting(waiters: readonly Waiter<R, T>[]): void {
    let counted = 0;
    for (const waiter of waiters) {
      if (waiter.waiting) continue;
      waiter.waiting = true;
      counted += 1;
    }
    if (counted === 0) return;
    this.#waiting += counted;
    this.hooks.waitingChanged(this.#waiting);
  }

  #fail(waiter: Waiter<R, T>, error: DlmError): void {
    if (this.#leave(waiter)) waiter.reject(error);
  }

  #grant(waiter: Waiter<R, T>, grant: Grant): void {
    if (waiter.settled) {
      // The wait ended (deadline, abort, closed connection) while the grant was in flight:
      // nobody will use this lease, so give it back at once.
      this.hooks.abandoned(waiter.request, grant);
      return;
    }
    const value = this.hooks.granted(waiter.request, grant);
    if (this.#leave(waiter)) waiter.resolve(value);
  }

  /**
   * Serves the queue: the head asks the backend, and on a grant the next head asks at once.
   * When the lock is held, the head sleeps until `wake()` or the holder's lease runs out.
   */
  async #pump(): Promise<void> {
    if (this.#pumping) {
      this.#again = true;
      return;
    }
    this.#pumping = true;
    try {
      while (await this.#serveHead());
    } finally {
      this.#pumping = false;
      this.hooks.idle();
    }
  }

  /** One attempt for the head. True: serve the (next) head now; false: stop until woken. */
  async #serveHead(): Promise<boolean> {
    this.#again = false;
    this.stop();
    const head = this.#waiters[0];
    if (!head || this.hooks.closed()) return false;
    let result: AcquireResult;
    try {
      result = await this.hooks.attempt(head.request);
    } catch (error) {
      this.#fail(head, asDlmError(error));
      return true;
    }
    if (result.granted) {
      // The next head asks at once: whether it waits is its own attempt's answer.
      this.#blocked = false;
      this.#grant(head, result.grant);
      return true;
    }
    head.ttlRemainingMs = result.ttlRemainingMs;
    // Refused: the head, and every wait behind it, waits for the holder.
    this.#blocked = true;
    this.#countWaiting(this.#waiters);
    if (this.#again) return true;
    this.#sleepHead(result.ttlRemainingMs);
    return false;
  }

  /** Until the holder's lease runs out (a backend event may wake the head sooner). */
  #sleepHead(ttlRemainingMs: number | undefined): void {
    const sleepMs =
      ttlRemainingMs === undefined ? this.unknownTtlRetryMs : Math.max(1, ttlRemainingMs) + 1;
    this.#retryTimer = this.clock.setTimer(() => void this.#pump(), sleepMs);
  }
}
