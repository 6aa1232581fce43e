import {
  type Clock,
  DlmError,
  formatToken,
  isDlmError,
  type Limits,
  type LockMode,
  type RetryAttempt,
  type RetryOptions,
  type RetryPolicy,
  type RetryRunOptions,
  retry,
  retryPolicy,
  type Timer,
  validateTtl,
} from '@dlm/core';
import { clockedSignal } from './clocked-signal.js';
import type { Connection } from './connection.js';
import { deadlineQueue } from './deadline-queue.js';
import { untraced } from './tracing.js';

// Node 20.20 and current browsers define Symbol.asyncDispose. Older runtimes get the symbol Node
// itself uses, so that `await using lease = ...` (which TypeScript lowers to a lookup of
// Symbol.asyncDispose) finds the method defined below.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('nodejs.asyncDispose');

/**
 * Why a lease ended without its holder releasing it:
 * - `deadline`: the local deadline passed (the lease was not extended in time). The server
 *   may still hold it for up to the drift margin; the client releases it in the background.
 * - `expired`: the server says the lease ran out (`lock.lost`, or NOT_HOLDER on extend).
 * - `revoked`: an administrator ended it.
 * - `maxHold`: it reached its cap on holding (`AcquireOptions.maxHoldMs`): the server ended it
 *   (`lock.lost`), or its last extend was granted up to the cap and the local deadline passed.
 */
export type LostReason = 'deadline' | 'expired' | 'revoked' | 'maxHold';

/** What `expiring` tells: the lease's validity left, by the local deadline, when it fired. */
export interface ExpiringEvent {
  readonly remainingMs: number;
}

/** Per-call options of `lease.extend` and `lease.release`. */
export interface LeaseCallOptions {
  /** Overrides the client's `retry` for this call (`false`: one try). */
  retry?: RetryOptions | false;
}

/**
 * A held lock. Its `signal` aborts as soon as this process must stop relying on it: on
 * release, on `lock.lost`, and — before the server would expire it — when the local deadline
 * passes. The local deadline is counted on a monotonic clock from when the acquire (or the
 * last successful extend) was sent, plus the granted TTL, minus a drift margin of
 * max(10 ms, 1% of the TTL).
 *
 * @example
 * await using lease = await client.acquire('reports', { ttlMs: 10_000 });
 * await writeReport({ fencingToken: lease.token, signal: lease.signal });
 * // released here, when `lease` goes out of scope
 */
export interface Lease extends AsyncDisposable {
  readonly name: string;
  /** The owner the lease was granted to (fresh per acquire unless the caller chose one). */
  readonly owner: string;
  /** The fencing token: pass it to the resource you protect, which rejects older ones. */
  readonly token: bigint;
  /** The lease length the server granted on the last acquire or extend (≥ the request). */
  readonly ttlMs: number;
  /** `exclusive`, or `shared` (a reader, a semaphore's permit: one of up to `limit` holders). */
  readonly mode: LockMode;
  /** Shared only: the most holders the name admits at once. */
  readonly limit: number | undefined;
  /**
   * Aborts when the lease ends: released, lost, or its local deadline passed. Its `aborted`,
   * `reason` and `throwIfAborted()` answer from the clock at that moment, also on a signal
   * taken before a stall (`const { signal } = lease`): a process that stalled past the
   * deadline sees it aborted before any timer has run.
   */
  readonly signal: AbortSignal;
  /**
   * Why the lease was lost, once it was (by the clock, as `signal`); `undefined` while held or
   * after a release.
   */
  readonly lost: LostReason | undefined;
  /**
   * Aborts when someone asks this holder to let go (`client.requestRelease`, or a waiting
   * acquire with `requestRelease`), on any server sharing the backend: the server's
   * `lock.releaseRequested`. Nothing is released by it; letting go (`release()`) is the holder's
   * call. Its `reason` is a DlmError CANCELLED whose message carries the requester's reason,
   * also in `releaseRequestReason`. A lease that ends without being asked never aborts it.
   */
  readonly releaseRequested: AbortSignal;
  /** The reason given with the first release request, once one came (`undefined` without one). */
  readonly releaseRequestReason: string | undefined;
  /** Milliseconds left before the local deadline, by the clock now; 0 once the lease has ended. */
  remainingMs(): number;
  /**
   * `expiring`: the lease's validity left (to its local deadline) fell below a third of its TTL
   * while its extends are failing (a try failed since the last extend that succeeded), once
   * per deadline: a warning that it will be lost unless an extend gets through (DynamoDB's
   * "danger zone"). The client's own `expiring` event says the same for every lease. Returns
   * the function that removes the listener.
   *
   * @example
   * lease.on('expiring', ({ remainingMs }) => log.warn(`lock ends in ${remainingMs} ms`));
   */
  on(event: 'expiring', listener: (event: ExpiringEvent) => void): () => void;
  /**
   * Throws a DlmError NOT_HOLDER unless the lease is held at this moment, by the clock (a
   * stalled event loop may not have run the deadline timer yet). Put it right before a write
   * the lease protects, next to passing its fencing token.
   *
   * @example
   * lease.assertHeld();
   * await store.put(key, value, { fencingToken: lease.token });
   */
  assertHeld(): void;
  /**
   * Resets the lease to `ttlMs` (default: the TTL it was acquired with) and moves the local
   * deadline, counted from when the extend that succeeded was sent. Retried under the client's
   * retry policy, never past the local deadline (an extend is idempotent: a re-sent one only
   * restarts the lease again). Rejects with NOT_HOLDER when the lease has ended (and then the
   * lease is lost), UNAVAILABLE when the server could not be reached in time.
   */
  extend(ttlMs?: number, options?: LeaseCallOptions): Promise<void>;
  /**
   * Releases the lock. `signal` aborts before the release is sent: from that moment another
   * holder may get the lock. Resolves `true` when this call freed it, `false` when the lease
   * had already ended (released, expired, revoked). Retried under the client's retry policy;
   * when a try's reply was lost and a retry then finds the lease gone (NOT_HOLDER), the lost
   * try is what freed it, and the result is `true` too. Rejects only when the server could not
   * be reached; the client then retries the release after reconnecting.
   */
  release(options?: LeaseCallOptions): Promise<boolean>;
  /** `release()`, never rejecting (errors go to the client's `error` event). */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What a lease needs from its client. */
export interface LeaseContext {
  clock: Clock;
  /** `{ clock }`, made once: what every `retry()` of the client's leases runs with. */
  retryOptions: RetryRunOptions;
  requestTimeoutMs: number;
  /** The client's retry policy: calls layer their own options over it. */
  retry: RetryPolicy;
  /** The bounds the server checks requests against, to check them before sending. */
  limits(): Limits;
  call: Connection['call'];
  /** Releases without a waiting caller; retried after a reconnect while it can still matter. */
  releaseInBackground(name: string, token: bigint, leaseKey: string, ttlMs: number): void;
  onEnded(handle: LeaseHandle): void;
  onLost(lease: Lease, reason: LostReason): void;
  /** The server said someone asked this lease's holder to let go. */
  onReleaseRequested(lease: Lease, reason: string | undefined): void;
  /** The lease's validity left fell below a third of its TTL while its extends fail. */
  onExpiring(lease: Lease, event: ExpiringEvent): void;
  reportError(error: unknown): void;
}

export interface LeaseGrant {
  name: string;
  owner: string;
  token: bigint;
  /** The lease's secret (protocol `leaseKey`), sent with every extend and release. */
  leaseKey: string;
  /** Granted TTL. */
  ttlMs: number;
  /** The TTL to ask for on extends. */
  requestedTtlMs: number;
  /** When the request that granted `ttlMs` was sent, on the context's clock. */
  sentAt: number;
  autoExtend: boolean;
  /** Absent: `exclusive`. */
  mode?: LockMode;
  /** Shared only. */
  limit?: number;
  /** Asked with a lock-delay: left to the server's expiry at its deadline, not released. */
  lockDelay?: boolean;
  /** Asked with a cap on holding (`maxHoldMs`). */
  maxHold?: boolean;
}

/** The client's side of a lease. */
export interface LeaseHandle {
  readonly lease: Lease;
  /** Key of the server-side lease: `lock.lost` is matched on it. */
  readonly key: string;
  /** The lease's secret (protocol `leaseKey`): for the client only, never on `lease`. */
  readonly leaseKey: string;
  lose(reason: LostReason): void;
  /** `lock.releaseRequested`: someone asked this holder to let go (it still holds the lease). */
  askRelease(reason: string | undefined): void;
  /** A new session exists: extend now, so the lease is tied to it (auto-extend only). */
  reconnected(): void;
  /** Ends the lease here without telling the server (the client is closing, offline). */
  forget(): void;
}

/** How much earlier than the server the client considers a lease over. */
export function driftMarginMs(ttlMs: number): number {
  return Math.max(10, Math.ceil(ttlMs * 0.01));
}

/**
 * The deadline queue a lease of `ttlMs` joins: one per power of two of the TTL (negative, apart
 * from the requests' queues), so that leases of one TTL share a timer and its queue mostly
 * appends, while a process using many TTLs makes at most a few dozen queues.
 */
function deadlineBucket(ttlMs: number): number {
  return -(2 ** Math.ceil(Math.log2(Math.max(1, ttlMs))));
}

export function leaseKey(name: string, token: bigint): string {
  return `${token}\u0000${name}`;
}

export function createLease(context: LeaseContext, grant: LeaseGrant): LeaseHandle {
  return new LeaseState(context, grant);
}

/**
 * One lease's state and behaviour. A class rather than a closure per method: a client acquires
 * and releases thousands of leases a second, and per-lease closures were the largest share of
 * what it allocated. The public `Lease` is a small facade over it.
 */
class LeaseState implements LeaseHandle {
  readonly lease: Lease;
  readonly key: string;
  readonly name: string;
  readonly owner: string;
  readonly token: bigint;
  readonly wireToken: string;
  /**
   * The lease key. Kept here, behind the facade's private field, and never on the `Lease`
   * itself: nothing that prints, logs or serializes a lease can show it.
   */
  readonly leaseKey: string;
  // Made when somebody reads `lease.signal`: most leases are acquired and released without it.
  controller: AbortController | undefined;
  // Why the lease ended, built only for a signal that exists or is read later.
  endReason: (() => DlmError) | undefined;
  ttlMs: number;
  deadline = 0;
  lost: LostReason | undefined;
  ended = false;
  // Made when somebody reads `lease.releaseRequested`, or when a request comes first.
  askedController: AbortController | undefined;
  asked = false;
  askedReason: string | undefined;
  // An entry in the client's deadline queue for this TTL: one timer for all the leases.
  private cancelDeadline: (() => void) | undefined;
  private extendTimer: Timer | undefined;
  // Made only once an extend's try fails: healthy leases carry no `expiring` state.
  private expiring: ExpiringWatch | undefined;
  private releaseRequested = false;
  private extendsPending = 0;
  // An extend was granted up to the lease's cap on holding: its deadline is the cap.
  private capped = false;
  // Extends go one at a time, so the deadline always comes from the newest one the server saw.
  private extendChain: Promise<unknown> | undefined;
  private readonly onDeadline = (): void => {
    if (this.ended) return;
    // At its cap on holding: the server ends it there, and counts it (a holder that renewed to
    // the cap is what the count is for), so it is not released from here.
    if (this.capped) {
      this.end('maxHold');
      return;
    }
    // Nobody here relies on the lease any more, but the server may hold it a little longer
    // (the margin, or a whole TTL if an extend is in flight): free it for the next holder. Not
    // a lease asked with a lock-delay: its holder wanted the name kept from others for a while
    // after an unclean end, and running out is one; the server's expiry starts the delay.
    if (!this.grant.lockDelay) {
      this.context.releaseInBackground(this.name, this.token, this.leaseKey, this.ttlMs);
    }
    this.end('deadline');
  };

  constructor(
    readonly context: LeaseContext,
    private readonly grant: LeaseGrant,
  ) {
    this.name = grant.name;
    this.owner = grant.owner;
    this.token = grant.token;
    this.wireToken = formatToken(grant.token);
    this.leaseKey = grant.leaseKey;
    this.ttlMs = grant.ttlMs;
    this.key = leaseKey(grant.name, grant.token);
    this.lease = new LeaseFacade(this);
    this.arm(grant.sentAt, grant.ttlMs);
  }

  /** The grant's mode and limit, read from it (no field of their own per lease). */
  get grantMode(): LockMode {
    return this.grant.mode ?? 'exclusive';
  }

  get grantLimit(): number | undefined {
    return this.grant.limit;
  }

  arm(sentAt: number, grantedTtlMs: number): void {
    const { clock } = this.context;
    this.ttlMs = grantedTtlMs;
    this.deadline = sentAt + grantedTtlMs - driftMarginMs(grantedTtlMs);
    // An extend got through: the warning is armed again by the next failing one.
    this.expiring?.timer?.cancel();
    this.expiring = undefined;
    this.cancelDeadline?.();
    const queue = deadlineQueue(clock, deadlineBucket(grantedTtlMs));
    this.cancelDeadline = queue.add(this.onDeadline, this.deadline - clock.now());
    // Past the cap no extend gets through: auto-extend stops at it.
    if (this.grant.autoExtend && !this.capped) {
      this.scheduleAutoExtend(sentAt + grantedTtlMs / 3 - clock.now());
    }
  }

  end(reason: LostReason | 'released', message = 'released'): void {
    if (this.ended) return;
    this.ended = true;
    this.cancelDeadline?.();
    this.extendTimer?.cancel();
    this.expiring?.timer?.cancel();
    this.context.onEnded(this);
    const { name } = this;
    if (reason === 'released') {
      this.endReason = () =>
        new DlmError('CANCELLED', `lease on ${JSON.stringify(name)} ${message}`);
      this.controller?.abort(this.endReason());
      return;
    }
    this.lost = reason;
    this.endReason = () =>
      new DlmError('NOT_HOLDER', `lease on ${JSON.stringify(name)} lost (${reason})`);
    this.controller?.abort(this.endReason());
    this.context.onLost(this.lease, reason);
  }

  /**
   * An extend's try failed: warn now when less than a third of the TTL is left, else when it
   * will be (unless an extend gets through first, which re-arms the lease).
   */
  extendTryFailed(): void {
    if (this.ended) return;
    this.expiring ??= { told: false, timer: undefined };
    const watch = this.expiring;
    if (watch.told || watch.timer) return;
    const dueIn = this.deadline - this.ttlMs / 3 - this.context.clock.now();
    if (dueIn <= 0) this.tellExpiring();
    else watch.timer = this.context.clock.setTimer(() => this.tellExpiring(), dueIn);
  }

  private tellExpiring(): void {
    const watch = this.expiring;
    this.checkDeadline();
    if (this.ended || !watch || watch.told) return;
    const { clock } = this.context;
    const remainingMs = Math.max(0, this.deadline - clock.now());
    const earlyMs = remainingMs - this.ttlMs / 3;
    // A timer may fire a fraction of a millisecond early: wait out the rest.
    if (earlyMs > 0) {
      watch.timer = clock.setTimer(() => this.tellExpiring(), earlyMs + 1);
      return;
    }
    watch.told = true;
    watch.timer = undefined;
    const event: ExpiringEvent = { remainingMs };
    for (const listener of [...(this.expiringListeners ?? [])]) {
      try {
        listener(event);
      } catch (error) {
        this.context.reportError(error);
      }
    }
    this.context.onExpiring(this.lease, event);
  }

  // The lease's own `expiring` listeners (most leases have none).
  expiringListeners: Set<(event: ExpiringEvent) => void> | undefined;

  /** Ends the lease if its local deadline passed before the timer could run (busy event loop). */
  checkDeadline(): void {
    if (!this.ended && this.context.clock.now() >= this.deadline) this.onDeadline();
  }

  assertLive(): void {
    this.checkDeadline();
    if (this.ended) {
      throw new DlmError(
        'NOT_HOLDER',
        `lease on ${JSON.stringify(this.name)} has ended (${this.lost ?? 'released'})`,
      );
    }
  }

  async extendOnce(requested: number, options: LeaseCallOptions): Promise<void> {
    this.assertLive();
    const { context } = this;
    const { clock } = context;
    const policy = retryPolicy(options.retry, context.retry);
    let sentAt = Number.NaN;
    let result: { ttlMs: number };
    try {
      result = await retry(
        (attempt) => {
          // A lease that ended between tries (lock.lost, its deadline) is not extended again.
          this.assertLive();
          return context
            .call(
              'lock.extend',
              // The key makes the extend work on any server: after a reconnect elsewhere too.
              { name: this.name, token: this.wireToken, ttlMs: requested, leaseKey: this.leaseKey },
              {
                write: true,
                timeoutMs: Math.max(1, Math.min(context.requestTimeoutMs, attempt.remainingMs)),
                signal: attempt.signal,
                // The reply of the try that succeeded anchors the deadline: a server that applied an
                // earlier, lost try as well only holds the lease longer than the client thinks.
                onSent: (at) => {
                  sentAt = at;
                },
              },
            )
            .catch((error: unknown) => {
              this.extendTryFailed();
              throw error;
            });
        },
        // Past the local deadline an answer no longer helps: the lease is over locally anyway.
        Object.assign({}, policy, {
          deadlineMs: Math.min(policy.deadlineMs, this.deadline - clock.now()),
        }),
        { clock },
      );
    } catch (error) {
      if (isDlmError(error, 'NOT_HOLDER')) this.end('expired');
      throw error;
    }
    this.assertLive();
    // Granted less than asked: only up to the lease's cap on holding.
    if (this.grant.maxHold && result.ttlMs < requested) this.capped = true;
    this.arm(sentAt, result.ttlMs);
    this.assertLive();
  }

  extend(requested = this.grant.requestedTtlMs, options: LeaseCallOptions = {}): Promise<void> {
    try {
      validateTtl(requested, this.context.limits());
    } catch (error) {
      return Promise.reject(error);
    }
    this.extendsPending++;
    const previous = this.extendChain ?? Promise.resolve();
    const run = previous.then(() => this.extendOnce(requested, options));
    const settled = run.finally(() => {
      this.extendsPending--;
    });
    this.extendChain = settled.catch(() => {});
    return settled;
  }

  private scheduleAutoExtend(delayMs: number): void {
    this.extendTimer?.cancel();
    this.extendTimer = this.context.clock.setTimer(() => this.autoExtendNow(), delayMs);
  }

  private autoExtendNow(): void {
    if (this.ended) return;
    this.extendTimer?.cancel();
    this.extendTimer = undefined;
    // Transient failures (no connection, a slow backend) are retried until the local deadline
    // decides (the extend's retry deadline is the lease's), at delays short enough for several
    // tries before it. When that fails, the deadline timer ends the lease; a NOT_HOLDER already
    // has; CANCELLED means the client is closing.
    const { initialDelayMs, maxDelayMs } = this.context.retry;
    const { ttlMs } = this;
    // A renewal is nobody's request: outside the trace its timer was set in.
    untraced(() =>
      this.extend(undefined, {
        retry: {
          attempts: Number.POSITIVE_INFINITY,
          initialDelayMs: Math.min(initialDelayMs, ttlMs / 20),
          maxDelayMs: Math.max(10, Math.min(maxDelayMs, ttlMs / 10)),
        },
      }),
    ).catch(() => {});
  }

  /** One promise chain: no async frame, and the failure's handling is built only on failure. */
  release(options: LeaseCallOptions = {}): Promise<boolean> {
    if (this.releaseRequested) return Promise.resolve(false);
    this.releaseRequested = true;
    const wasLive = !this.ended;
    let attempt: ReleaseAttempt;
    let released: Promise<unknown>;
    try {
      this.end('released');
      const { context } = this;
      const policy = retryPolicy(options.retry, context.retry);
      attempt = new ReleaseAttempt(this, policy.signals.length > 0);
      released = retry(attempt.run, policy, context.retryOptions);
    } catch (error) {
      return Promise.reject(error);
    }
    return released.then(freed, (error: unknown) => this.releaseFailed(error, attempt, wasLive));
  }

  private releaseFailed(error: unknown, attempt: ReleaseAttempt, wasLive: boolean): boolean {
    // The lease was live when release() was called (its local deadline, S6, comes before the
    // server's expiry), so a NOT_HOLDER after a try whose reply was lost most likely means that
    // try freed it. It may instead have run out or been revoked between the tries; the caller
    // cannot act on the difference: either way this holder no longer holds it.
    if (isDlmError(error, 'NOT_HOLDER')) return attempt.maybeApplied && wasLive;
    if (isDlmError(error, 'UNAVAILABLE')) {
      this.context.releaseInBackground(this.name, this.token, this.leaseKey, this.ttlMs);
    }
    throw error;
  }

  lose(reason: LostReason): void {
    this.end(reason);
  }

  askRelease(reason: string | undefined): void {
    if (this.ended || this.asked) return;
    this.asked = true;
    this.askedReason = reason;
    this.askedController?.abort(this.askedError());
    this.context.onReleaseRequested(this.lease, reason);
  }

  askedError(): DlmError {
    const why = this.askedReason === undefined ? '' : `: ${this.askedReason}`;
    return new DlmError('CANCELLED', `release of ${JSON.stringify(this.name)} requested${why}`);
  }

  forget(): void {
    this.end('released', 'given up: the client closed');
  }

  reconnected(): void {
    if (this.grant.autoExtend && !this.ended && this.extendsPending === 0) this.autoExtendNow();
  }
}

const freed = (): boolean => true;

/** The tries of one release: whether one whose reply was lost may have freed the lock. */
class ReleaseAttempt {
  maybeApplied = false;

  constructor(
    private readonly state: LeaseState,
    // Without a signal in the policy nothing can abort the attempt's: skip it (no allocation).
    private readonly withSignal: boolean,
  ) {}

  readonly run = (attempt: RetryAttempt): Promise<unknown> => {
    const { state } = this;
    const { context } = state;
    return context
      .call(
        'lock.release',
        { name: state.name, token: state.wireToken, leaseKey: state.leaseKey },
        {
          write: true,
          timeoutMs: Math.max(1, Math.min(context.requestTimeoutMs, attempt.remainingMs)),
          ...(this.withSignal ? { signal: attempt.signal } : {}),
        },
      )
      .catch((error: unknown) => {
        if (isDlmError(error) && error.details.indeterminate) this.maybeApplied = true;
        throw error;
      });
  };
}

/** A lease's `expiring` warning, once an extend's try failed: told once per deadline. */
interface ExpiringWatch {
  told: boolean;
  timer: Timer | undefined;
}

/** The public face of a lease: what `Lease` promises, and nothing of the state behind it. */
class LeaseFacade implements Lease {
  readonly #state: LeaseState;
  readonly name: string;
  readonly owner: string;
  readonly token: bigint;

  constructor(state: LeaseState) {
    this.#state = state;
    this.name = state.name;
    this.owner = state.owner;
    this.token = state.token;
  }

  get mode(): LockMode {
    return this.#state.grantMode;
  }

  get limit(): number | undefined {
    return this.#state.grantLimit;
  }

  get ttlMs(): number {
    return this.#state.ttlMs;
  }

  // Each synchronous look at the lease first asks the clock (checkDeadline): the answer must
  // not depend on whether the deadline timer got to run.
  get signal(): AbortSignal {
    const state = this.#state;
    state.checkDeadline();
    if (!state.controller) {
      state.controller = new AbortController();
      // A signal kept across a stall asks the clock too, whenever it is read.
      clockedSignal(state.controller.signal, () => state.checkDeadline());
      if (state.endReason) state.controller.abort(state.endReason());
    }
    return state.controller.signal;
  }

  get releaseRequested(): AbortSignal {
    const state = this.#state;
    if (!state.askedController) {
      state.askedController = new AbortController();
      if (state.asked) state.askedController.abort(state.askedError());
    }
    return state.askedController.signal;
  }

  get releaseRequestReason(): string | undefined {
    return this.#state.askedReason;
  }

  get lost(): LostReason | undefined {
    this.#state.checkDeadline();
    return this.#state.lost;
  }

  remainingMs(): number {
    const state = this.#state;
    state.checkDeadline();
    return state.ended ? 0 : Math.max(0, state.deadline - state.context.clock.now());
  }

  assertHeld(): void {
    this.#state.assertLive();
  }

  on(event: 'expiring', listener: (event: ExpiringEvent) => void): () => void {
    if (event !== 'expiring') {
      throw new DlmError(
        'INVALID_PARAMS',
        `a lease emits 'expiring' only, not ${JSON.stringify(event)}`,
        {
          field: 'event',
        },
      );
    }
    const state = this.#state;
    state.expiringListeners ??= new Set();
    const listeners = state.expiringListeners;
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }

  extend(ttlMs?: number, options?: LeaseCallOptions): Promise<void> {
    return this.#state.extend(ttlMs, options);
  }

  release(options?: LeaseCallOptions): Promise<boolean> {
    return this.#state.release(options);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.#state.release();
    } catch (error) {
      this.#state.context.reportError(error);
    }
  }
}
