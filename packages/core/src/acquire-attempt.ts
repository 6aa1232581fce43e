import type { AcquireResult } from './backend.js';
import { track } from './lease-tracking.js';
import { conflictError, ranOutError } from './lock-errors.js';
import type { NameState, QueuedAcquire, ServiceContext } from './name-state.js';

/**
 * One tryAcquire, checked so that no grant is reported already expired (S5), then followed.
 * A request that can never be granted as asked (`conflict`) rejects with INVALID_PARAMS: a
 * wait for it would only run out.
 */
export async function attempt(
  ctx: ServiceContext,
  state: NameState,
  { request, leaseKey, onLost, around }: QueuedAcquire,
): Promise<AcquireResult> {
  const startedAt = ctx.clock.now();
  const result = await ctx.calls.bounded(
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
  if (!result.granted) {
    if (result.conflict) throw conflictError(request, result.conflict);
    return result;
  }
  if (ctx.clock.now() - startedAt >= result.grant.ttlMs) {
    ctx.calls.releaseQuietly(result.grant, request.keyHash);
    throw ranOutError();
  }
  track(
    ctx,
    state,
    result.grant,
    { leaseKey, keyHash: request.keyHash },
    request,
    startedAt,
    onLost,
  );
  return result;
}
