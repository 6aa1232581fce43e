import { type Budget, boundedCall, DlmError, isDlmError, sleep } from '@dlm/core';
import { GRPCResourceExhastedError, isRecoverableError } from 'etcd3';

/**
 * The one retry policy of this adapter. etcd3's own fault handling (cockatiel retries and
 * circuit breakers) is switched off for clients the adapter creates, because a breaker that
 * stays open for seconds after the cluster came back, or retries that outlast the caller,
 * would break the bound every primitive keeps: UNAVAILABLE within `commandTimeoutMs`.
 */

/**
 * `idempotent`: running the call twice has the effect of running it once (re-acquire by the
 * same owner with the same lease, extend with the same new lease, reads), so any transient
 * failure may be retried. `once`: retried only when the failure proves the request never
 * reached etcd (release, revoke: a second run would answer "not holder" for a release that
 * happened).
 */
export type RetryMode = 'idempotent' | 'once';

/** Whether etcd may never have seen the request: safe to send again, nothing was applied. */
function notSent(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return (
    /No connection established|ECONNREFUSED|failed to connect|Name resolution failed/i.test(
      message,
    ) ||
    // Refused before being proposed to Raft.
    /etcdserver: (no leader|too many requests|not capable)/.test(message)
  );
}

function transient(error: unknown): boolean {
  return (
    error instanceof Error &&
    (isRecoverableError(error) || error instanceof GRPCResourceExhastedError || notSent(error))
  );
}

/**
 * A budget of time shared by every step of one primitive: core's, re-exported so that the
 * adapter's modules keep one import. Its clock is where every step sets its timers.
 */
export { type Budget, budget } from '@dlm/core';

function timedOut(what: string, indeterminate: boolean, cause: unknown): DlmError {
  return new DlmError(
    'UNAVAILABLE',
    `${what}: etcd did not answer in time`,
    Object.assign(
      {},
      cause === undefined ? {} : { cause },
      indeterminate ? { indeterminate: true } : {},
    ),
  );
}

/**
 * Runs `call` (given a gRPC deadline as a Date-based epoch ms, as grpc-js wants it) until it
 * succeeds, fails for good, or the budget runs out. Each attempt gets at most half the budget
 * when more than one may fit, so a stalled member (SIGSTOP, blackholed) leaves time to try
 * another. Rejects only with DlmError UNAVAILABLE; `indeterminate` when a write may have been
 * applied.
 */
export async function withRetries<T>(
  limit: Budget,
  mode: RetryMode,
  write: boolean,
  call: (grpcDeadline: number) => Promise<T>,
): Promise<T> {
  let maybeApplied = false;
  let lastError: unknown;
  let delayMs = 0;
  for (let attempt = 0; ; attempt += 1) {
    const remaining = limit.remainingMs();
    if (remaining <= 0) {
      throw timedOut(limit.what, write && maybeApplied, lastError);
    }
    const attemptMs = attempt === 0 && remaining > 400 ? Math.max(200, remaining / 2) : remaining;
    try {
      // grpc-js enforces the deadline itself; the bound is the backstop for anything in the
      // client that waits outside a call (authentication, channel set-up).
      return await boundedCall(limit.what, attemptMs, () => call(Date.now() + attemptMs), {
        clock: limit.clock,
        timeoutError: () => new Error('deadline exceeded (client side)'),
      });
    } catch (error) {
      if (isDlmError(error)) throw error;
      lastError = error;
      const reason = error instanceof Error ? error.message : String(error);
      const sent = !notSent(error);
      if (!transient(error) && !/client side/.test(reason)) {
        throw new DlmError('UNAVAILABLE', `${limit.what}: ${reason}`, {
          cause: error,
          ...(write && sent ? { indeterminate: true } : {}),
        });
      }
      maybeApplied ||= sent;
      if (mode === 'once' && maybeApplied) {
        throw new DlmError('UNAVAILABLE', `${limit.what}: ${reason}`, {
          cause: error,
          ...(write ? { indeterminate: true } : {}),
        });
      }
      // The first retry goes straight to another member; later ones back off a little so a
      // cluster in the middle of an election is not flooded.
      await sleep(limit.clock, Math.min(delayMs, Math.max(0, limit.remainingMs())));
      delayMs = Math.min(Math.max(25, delayMs * 2), 250);
    }
  }
}
