import type { AcquireResult, Grant } from './backend.js';
import { track } from './lease-tracking.js';
import { conflictError, ranOutError } from './lock-errors.js';
import type { NameState, QueuedAcquire, ServiceContext } from './name-state.js';

/**
 * One tryAcquire (a try-lock), checked so that no grant is reported already expired (S5), then
 * followed. A request that can never be granted as asked (`conflict`) rejects with
 * INVALID_PARAMS: a wait for it would only run out.
 */
export async function attempt(
  ctx: ServiceContext,
  state: NameState,
  queued: QueuedAcquire,
): Promise<AcquireResult> {
  const { request, leaseKey, around } = queued;
  const startedAt = ctx.clock.now();
  const result = await askBackend(ctx, request, around);
  if (!result.granted) {
    if (result.conflict) throw conflictError(request, result.conflict);
    return result;
  }
  reportable(ctx, result.grant, ctx.clock.now() - startedAt, request.keyHash);
  const proof = { leaseKey, keyHash: request.keyHash };
  track(ctx, state, result.grant, proof, request, startedAt, queued);
  return result;
}

/** One `tryAcquire`, bounded and observed (a try-lock's, or the head's of this server's FIFO). */
export function askBackend(
  ctx: ServiceContext,
  request: QueuedAcquire['request'],
  around: QueuedAcquire['around'],
): Promise<AcquireResult> {
  return ctx.calls.bounded(
    'acquire',
    'tryAcquire',
    () => ctx.backend.tryAcquire(request),
    (late) => {
      // The caller was already told UNAVAILABLE: a grant nobody will use must not linger.
      if (late.granted) ctx.calls.releaseQuietly(late.grant, request.keyHash);
    },
    undefined,
    around,
  );
}

/**
 * S5, once for every grant the service reports (a try-lock's, a wait's): a grant whose write was
 * sent `elapsedMs` ago and whose lease is already over by now is handed back, never reported.
 */
export function reportable(
  ctx: ServiceContext,
  grant: Grant,
  elapsedMs: number,
  keyHash: string,
): void {
  if (elapsedMs < grant.ttlMs) return;
  ctx.calls.releaseQuietly(grant, keyHash);
  throw ranOutError();
}
