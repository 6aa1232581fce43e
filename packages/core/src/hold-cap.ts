import type { Grant } from './backend.js';
import type { TrackedLease } from './lease-tracking.js';
import type { LostEvent } from './lock-service.js';
import type { NameState, ServiceContext } from './name-state.js';

/**
 * Caps on holding (`AcquireOptions.maxHoldMs`). The backend keeps a lease's cap with it and
 * clamps every extend to it, so the lease's own end comes at the cap at the latest; what core
 * adds is the holder's word for that end (`lock.lost` with reason `maxHold`) and, where the
 * backend's leases are coarser than a millisecond (etcd's whole seconds), the end itself.
 */

/**
 * Records when `lease` reaches its cap, on this service's clock, from what the backend said
 * (`holdRemainingMs`) or, for a fresh grant whose adapter did not say, from the request.
 * Counted from `startedAt`, when the request was sent: never later than the backend's cap.
 */
export function noteHoldCap(
  ctx: ServiceContext,
  state: NameState,
  lease: TrackedLease,
  grant: Grant,
  maxHoldMs: number | undefined,
  startedAt: number,
  endAtCap: (state: NameState, token: bigint) => void,
): void {
  const holdMs = grant.holdRemainingMs ?? (lease.capAt === undefined ? maxHoldMs : undefined);
  if (holdMs === undefined) return;
  const capAt = startedAt + holdMs;
  if (lease.capAt !== undefined && lease.capAt <= capAt) return;
  lease.capAt = capAt;
  // The backend's lease ends at the cap by itself where it counts milliseconds; a coarser one
  // may run up to a granule past it, so core ends it there.
  if (ctx.backend.capabilities.ttlGranularityMs <= 1) return;
  lease.capTimer?.cancel();
  lease.capTimer = ctx.clock.setTimer(() => {
    lease.capTimer = undefined;
    endAtCap(state, lease.token);
  }, capAt - ctx.clock.now());
}

/**
 * Why a followed lease ended, as its holder hears it: an expiry at or past the lease's cap is
 * the cap's doing (its last extend was clamped to it).
 */
export function lostReason(
  ctx: ServiceContext,
  lease: TrackedLease,
  reason: LostEvent['reason'],
): LostEvent['reason'] {
  if (reason !== 'expired' || lease.capAt === undefined) return reason;
  return ctx.clock.now() >= lease.capAt ? 'maxHold' : reason;
}
