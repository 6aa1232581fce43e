import type { AcquireResult } from './backend.js';
import { track } from './lease-tracking.js';
import { ranOutError } from './lock-errors.js';
import type { NameState, QueuedAcquire, ServiceContext } from './name-state.js';

/** One tryAcquire, checked so that no grant is reported already expired (S5), then followed. */
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
  if (!result.granted) return result;
  if (ctx.clock.now() - startedAt >= result.grant.ttlMs) {
    ctx.calls.releaseQuietly(result.grant, request.keyHash);
    throw ranOutError();
  }
  track(ctx, state, result.grant, { leaseKey, keyHash: request.keyHash }, startedAt, onLost);
  return result;
}
