import {
  type Clock,
  DlmError,
  formatToken,
  isDlmError,
  type RetryOptions,
  type RetryPolicy,
  retry,
  retryPolicy,
  type Timer,
} from '@dlm/core';
import type { Connection } from './connection.js';

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
 */
export type LostReason = 'deadline' | 'expired' | 'revoked';

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
  /** Aborts when the lease ends: released, lost, or its local deadline passed. */
  readonly signal: AbortSignal;
  /** Why the lease was lost, once it was; `undefined` while held or after a release. */
  readonly lost: LostReason | undefined;
  /** Milliseconds left before the local deadline; 0 once the lease has ended. */
  remainingMs(): number;
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
  requestTimeoutMs: number;
  /** The client's retry policy: calls layer their own options over it. */
  retry: RetryPolicy;
  call: Connection['call'];
  /** Releases without a waiting caller; retried after a reconnect while it can still matter. */
  releaseInBackground(name: string, token: bigint, ttlMs: number): void;
  onEnded(handle: LeaseHandle): void;
  onLost(lease: Lease, reason: LostReason): void;
  reportError(error: unknown): void;
}

export interface LeaseGrant {
  name: string;
  owner: string;
  token: bigint;
  /** Granted TTL. */
  ttlMs: number;
  /** The TTL to ask for on extends. */
  requestedTtlMs: number;
  /** When the request that granted `ttlMs` was sent, on the context's clock. */
  sentAt: number;
  autoExtend: boolean;
}

/** The client's side of a lease. */
export interface LeaseHandle {
  readonly lease: Lease;
  /** Key of the server-side lease: `lock.lost` is matched on it. */
  readonly key: string;
  lose(reason: LostReason): void;
  /** A new session exists: extend now, so the lease is tied to it (auto-extend only). */
  reconnected(): void;
  /** Ends the lease here without telling the server (the client is closing, offline). */
  forget(): void;
}

/** How much earlier than the server the client considers a lease over. */
export function driftMarginMs(ttlMs: number): number {
  return Math.max(10, Math.ceil(ttlMs * 0.01));
}

export function leaseKey(name: string, token: bigint): string {
  return `${token}\u0000${name}`;
}

export function createLease(context: LeaseContext, grant: LeaseGrant): LeaseHandle {
  const { clock } = context;
  const { name, owner, token, requestedTtlMs, autoExtend } = grant;
  const wireToken = formatToken(token);
  // Made when somebody reads `lease.signal`: most leases are acquired and released without it.
  let controller: AbortController | undefined;
  // Why the lease ended, built only for a signal that exists or is read later.
  let endReason: (() => DlmError) | undefined;
  let ttlMs = grant.ttlMs;
  let deadline = 0;
  let deadlineTimer: Timer | undefined;
  let extendTimer: Timer | undefined;
  let ended = false;
  let releaseRequested = false;
  let lost: LostReason | undefined;
  let extendsPending = 0;
  // Extends go one at a time, so the deadline always comes from the newest one the server saw.
  let extendChain: Promise<unknown> = Promise.resolve();

  function arm(sentAt: number, grantedTtlMs: number): void {
    ttlMs = grantedTtlMs;
    deadline = sentAt + grantedTtlMs - driftMarginMs(grantedTtlMs);
    deadlineTimer?.cancel();
    deadlineTimer = clock.setTimer(onDeadline, deadline - clock.now());
    if (autoExtend) scheduleAutoExtend(sentAt + grantedTtlMs / 3 - clock.now());
  }

  function onDeadline(): void {
    if (ended) return;
    // Nobody here relies on the lease any more, but the server may hold it a little longer
    // (the margin, or a whole TTL if an extend is in flight): free it for the next holder.
    context.releaseInBackground(name, token, ttlMs);
    end('deadline');
  }

  function end(reason: LostReason | 'released', message = 'released'): void {
    if (ended) return;
    ended = true;
    deadlineTimer?.cancel();
    extendTimer?.cancel();
    context.onEnded(handle);
    if (reason === 'released') {
      endReason = () => new DlmError('CANCELLED', `lease on ${JSON.stringify(name)} ${message}`);
      controller?.abort(endReason());
      return;
    }
    lost = reason;
    endReason = () =>
      new DlmError('NOT_HOLDER', `lease on ${JSON.stringify(name)} lost (${reason})`);
    controller?.abort(endReason());
    context.onLost(lease, reason);
  }

  function assertLive(): void {
    if (!ended && clock.now() >= deadline) onDeadline(); // the timer is late (busy event loop)
    if (ended) {
      throw new DlmError(
        'NOT_HOLDER',
        `lease on ${JSON.stringify(name)} has ended (${lost ?? 'released'})`,
      );
    }
  }

  async function extendOnce(requested: number, options: LeaseCallOptions): Promise<void> {
    assertLive();
    const policy = retryPolicy(options.retry, context.retry);
    let sentAt = Number.NaN;
    let result: { ttlMs: number };
    try {
      result = await retry(
        (attempt) => {
          // A lease that ended between tries (lock.lost, its deadline) is not extended again.
          assertLive();
          return context.call(
            'lock.extend',
            { name, token: wireToken, ttlMs: requested },
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
          );
        },
        // Past the local deadline an answer no longer helps: the lease is over locally anyway.
        { ...policy, deadlineMs: Math.min(policy.deadlineMs, deadline - clock.now()) },
        { clock },
      );
    } catch (error) {
      if (isDlmError(error, 'NOT_HOLDER')) end('expired');
      throw error;
    }
    assertLive();
    arm(sentAt, result.ttlMs);
    assertLive();
  }

  function extend(requested = requestedTtlMs, options: LeaseCallOptions = {}): Promise<void> {
    extendsPending++;
    const run = extendChain.then(() => extendOnce(requested, options));
    const settled = run.finally(() => {
      extendsPending--;
    });
    extendChain = settled.catch(() => {});
    return settled;
  }

  function scheduleAutoExtend(delayMs: number): void {
    extendTimer?.cancel();
    extendTimer = clock.setTimer(autoExtendNow, delayMs);
  }

  function autoExtendNow(): void {
    if (ended) return;
    extendTimer?.cancel();
    extendTimer = undefined;
    // Transient failures (no connection, a slow backend) are retried until the local deadline
    // decides (the extend's retry deadline is the lease's), at delays short enough for several
    // tries before it. When that fails, the deadline timer ends the lease; a NOT_HOLDER already
    // has; CANCELLED means the client is closing.
    const { initialDelayMs, maxDelayMs } = context.retry;
    extend(undefined, {
      retry: {
        attempts: Number.POSITIVE_INFINITY,
        initialDelayMs: Math.min(initialDelayMs, ttlMs / 20),
        maxDelayMs: Math.max(10, Math.min(maxDelayMs, ttlMs / 10)),
      },
    }).catch(() => {});
  }

  async function release(options: LeaseCallOptions = {}): Promise<boolean> {
    if (releaseRequested) return false;
    releaseRequested = true;
    const wasLive = !ended;
    end('released');
    let maybeApplied = false;
    const policy = retryPolicy(options.retry, context.retry);
    // Without a signal in the policy nothing can abort the attempt's: skip it (no allocation).
    const withSignal = policy.signals.length > 0;
    try {
      await retry(
        (attempt) =>
          context
            .call(
              'lock.release',
              { name, token: wireToken },
              {
                write: true,
                timeoutMs: Math.max(1, Math.min(context.requestTimeoutMs, attempt.remainingMs)),
                ...(withSignal ? { signal: attempt.signal } : {}),
              },
            )
            .catch((error: unknown) => {
              if (isDlmError(error) && error.details.indeterminate) maybeApplied = true;
              throw error;
            }),
        policy,
        { clock },
      );
      return true;
    } catch (error) {
      // The lease was live when release() was called (its local deadline, S6, comes before the
      // server's expiry), so a NOT_HOLDER after a try whose reply was lost most likely means that
      // try freed it. It may instead have run out or been revoked between the tries; the caller
      // cannot act on the difference: either way this holder no longer holds it.
      if (isDlmError(error, 'NOT_HOLDER')) return maybeApplied && wasLive;
      if (isDlmError(error, 'UNAVAILABLE')) context.releaseInBackground(name, token, ttlMs);
      throw error;
    }
  }

  const lease: Lease = {
    name,
    owner,
    token,
    get ttlMs() {
      return ttlMs;
    },
    get signal() {
      if (!controller) {
        controller = new AbortController();
        if (endReason) controller.abort(endReason());
      }
      return controller.signal;
    },
    get lost() {
      return lost;
    },
    remainingMs: () => (ended ? 0 : Math.max(0, deadline - clock.now())),
    extend,
    release,
    async [Symbol.asyncDispose]() {
      try {
        await release();
      } catch (error) {
        context.reportError(error);
      }
    },
  };

  const handle: LeaseHandle = {
    lease,
    key: leaseKey(name, token),
    lose: (reason) => end(reason),
    forget: () => end('released', 'given up: the client closed'),
    reconnected() {
      if (autoExtend && !ended && extendsPending === 0) autoExtendNow();
    },
  };

  arm(grant.sentAt, grant.ttlMs);
  return handle;
}
