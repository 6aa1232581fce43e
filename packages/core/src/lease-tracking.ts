import type { Grant, LockEvent } from './backend.js';
import { cancelCheck, see } from './holder-view.js';
import type { LostEvent } from './lock-service.js';
import { followsEnd, type NameState, type ServiceContext } from './name-state.js';

/** A lease granted through this service, whose holder is told when it ends (`onLost`). */
export interface TrackedLease {
  token: bigint;
  owner: string;
  /** Kept so that the service's own caller may release, extend or re-acquire without it. */
  leaseKey: string;
  keyHash: string;
  onLost: ((event: LostEvent) => void) | undefined;
}

/**
 * Follows a lease granted or extended here, `startedAt` being when its request was sent. `key`
 * brings the hash the request already made (the backend keeps that same string): hashing again
 * here was a second 43-character string per held lease.
 */
export function track(
  ctx: ServiceContext,
  state: NameState,
  grant: Grant,
  key: { leaseKey: string; keyHash: string },
  startedAt: number,
  onLost: ((event: LostEvent) => void) | undefined,
): void {
  // This lease's end overtook the reply (a release racing an idempotent re-acquire of the
  // same lease): it is over already, nothing to follow.
  if (grant.token === state.lastEnded) return;
  const previous = state.lease;
  if (previous && previous.token !== grant.token) lose(ctx, state, 'expired');
  const lease: TrackedLease = state.lease ?? {
    token: grant.token,
    owner: grant.owner,
    leaseKey: key.leaseKey,
    keyHash: key.keyHash,
    onLost: undefined,
  };
  lease.onLost = onLost ?? lease.onLost;
  state.lease = lease;
  see(ctx, state, grant.token, grant.owner, startedAt + grant.ttlMs);
}

/** Stops following the name's lease (released, lost, given back). */
export function untrack(ctx: ServiceContext, state: NameState): TrackedLease | undefined {
  const lease = state.lease;
  if (!lease) return undefined;
  state.lease = undefined;
  if (!followsEnd(ctx, state)) cancelCheck(state);
  return lease;
}

/** The lease ended other than by its holder's release: the observer and the holder hear it. */
export function lose(ctx: ServiceContext, state: NameState, reason: LostEvent['reason']): void {
  const lease = untrack(ctx, state);
  if (!lease) return;
  const event: LostEvent = { name: state.name, token: lease.token, reason };
  ctx.notify('lost', event);
  if (!lease.onLost) return;
  try {
    lease.onLost(event);
  } catch {
    // A listener's failure must not break the service.
  }
}

/** What a backend event means for the lease this service follows for the name. */
export function leaseHears(ctx: ServiceContext, state: NameState, event: LockEvent): void {
  const lease = state.lease;
  if (!lease) return;
  if (event.token === lease.token) {
    if (event.type === 'expired' || event.type === 'revoked') lose(ctx, state, event.type);
    else if (event.type === 'released') untrack(ctx, state);
  } else if (event.type === 'acquired' && event.token !== undefined && event.token > lease.token) {
    // Somebody else holds it now, so our lease ended without us seeing it end. An older
    // grant's event may arrive late (events and replies travel apart): ignore those.
    lose(ctx, state, 'expired');
  }
}
