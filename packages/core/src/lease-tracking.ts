import type { Grant, LockEvent } from './backend.js';
import type { Timer } from './clock.js';
import { lostReason, noteHoldCap } from './hold-cap.js';
import { cancelCheck, see } from './holder-view.js';
import type { LostEvent } from './lock-service.js';
import { followsEnd, type NameState, type ServiceContext } from './name-state.js';
import type { Proof } from './proofs.js';
import type { ReleaseRequestedEvent } from './release-requests.js';
import type { LockMode } from './validation.js';

/** A lease granted through this service, whose holder is told when it ends (`onLost`). */
export interface TrackedLease {
  token: bigint;
  owner: string;
  /** Kept so that the service's own caller may release, extend or re-acquire without it. */
  leaseKey: string;
  keyHash: string;
  /**
   * 0: `exclusive`; else `shared`, with the holders' limit it was granted with. One field for
   * both (see `specOfLease`): 8 bytes a held lock, counted by the scale benchmark.
   */
  sharedLimit: number;
  onLost: ((event: LostEvent) => void) | undefined;
  /** Told when someone asks the holder to let go (`release-requests.ts`). */
  onReleaseRequested: ((event: ReleaseRequestedEvent) => void) | undefined;
  /**
   * With a cap on holding: when the lease reaches it, on the service's clock (`hold-cap.ts`).
   * Set only on capped leases, so an uncapped one costs no more.
   */
  capAt?: number;
  /** Where core itself ends the lease at its cap (a backend with coarse leases). */
  capTimer?: Timer | undefined;
}

/** Whom a followed lease tells of its end and of requests to let go. */
export interface LeaseListeners {
  onLost?: ((event: LostEvent) => void) | undefined;
  onReleaseRequested?: ((event: ReleaseRequestedEvent) => void) | undefined;
}

/**
 * The leases a name's state follows: none, one (the exclusive case, and most shared ones), or
 * several shared holders through this service, by token. One lease is kept bare: a Map costs
 * about 200 bytes, and the scale benchmark counts the heap per held lock.
 */
export type TrackedLeases = TrackedLease | Map<bigint, TrackedLease> | undefined;

/** The lease with `token` this service follows for the name, if any. */
export function leaseOf(state: NameState, token: bigint): TrackedLease | undefined {
  const { leases } = state;
  if (leases === undefined) return undefined;
  if (leases instanceof Map) return leases.get(token);
  return leases.token === token ? leases : undefined;
}

const NO_LEASES: readonly TrackedLease[] = [];

/** Every lease this service follows for the name, by increasing token. */
export function leasesOf(state: NameState): readonly TrackedLease[] {
  const { leases } = state;
  if (leases === undefined) return NO_LEASES;
  if (!(leases instanceof Map)) return [leases];
  return [...leases.values()].sort((a, b) => (a.token < b.token ? -1 : 1));
}

function addLease(state: NameState, lease: TrackedLease): void {
  const { leases } = state;
  if (leases === undefined) state.leases = lease;
  else if (leases instanceof Map) leases.set(lease.token, lease);
  else
    state.leases = new Map([
      [leases.token, leases],
      [lease.token, lease],
    ]);
}

function removeLease(state: NameState, token: bigint): TrackedLease | undefined {
  const { leases } = state;
  if (leases === undefined) return undefined;
  if (!(leases instanceof Map)) {
    if (leases.token !== token) return undefined;
    state.leases = undefined;
    return leases;
  }
  const lease = leases.get(token);
  if (!lease) return undefined;
  leases.delete(token);
  // Back to the bare slot once one lease is left.
  if (leases.size === 1) state.leases = leases.values().next().value;
  else if (leases.size === 0) state.leases = undefined;
  return lease;
}

/** The mode and limit a lease was asked with (`limit` 1 for `exclusive`). */
export interface LeaseSpec {
  mode: LockMode;
  limit: number;
}

export function specOfLease({ sharedLimit }: TrackedLease): LeaseSpec {
  return sharedLimit === 0
    ? { mode: 'exclusive', limit: 1 }
    : { mode: 'shared', limit: sharedLimit };
}

/**
 * Follows a lease granted or extended here with the key (and its hash) it was asked with,
 * `startedAt` being when its request was sent, and the cap on holding it was asked with.
 */
export function track(
  ctx: ServiceContext,
  state: NameState,
  grant: Grant,
  { leaseKey, keyHash }: Proof,
  { mode, limit, maxHoldMs }: LeaseSpec & { maxHoldMs?: number | undefined },
  startedAt: number,
  { onLost, onReleaseRequested }: LeaseListeners,
): void {
  // This lease's end overtook the reply (a release racing an idempotent re-acquire of the
  // same lease): it is over already, nothing to follow.
  if (grant.token === state.lastEnded) return;
  let lease = leaseOf(state, grant.token);
  if (!lease) {
    // A newer grant ends the leases it could not be granted beside: every earlier one for an
    // exclusive grant, the exclusive ones for a shared grant.
    endOlder(ctx, state, grant.token, mode);
    const sharedLimit = mode === 'shared' ? limit : 0;
    lease = {
      token: grant.token,
      owner: grant.owner,
      leaseKey,
      keyHash,
      sharedLimit,
      onLost,
      onReleaseRequested,
    };
    addLease(state, lease);
  }
  lease.onLost = onLost ?? lease.onLost;
  lease.onReleaseRequested = onReleaseRequested ?? lease.onReleaseRequested;
  noteHoldCap(ctx, state, lease, grant, maxHoldMs, startedAt, (capped, token) =>
    endAtCap(ctx, capped, token),
  );
  see(ctx, state, grant.token, grant.owner, startedAt + grant.ttlMs, mode);
}

/** Leases below `token` that a grant in `mode` with `token` proves ended: they are lost. */
function endOlder(ctx: ServiceContext, state: NameState, token: bigint, mode: LockMode): void {
  if (state.leases === undefined) return;
  for (const lease of leasesOf(state)) {
    if (lease.token < token && (mode === 'exclusive' || lease.sharedLimit === 0)) {
      lose(ctx, state, lease.token, 'expired');
    }
  }
}

/** Stops following the lease `token` (released, lost, given back). */
export function untrack(
  ctx: ServiceContext,
  state: NameState,
  token: bigint,
): TrackedLease | undefined {
  const lease = removeLease(state, token);
  if (!lease) return undefined;
  lease.capTimer?.cancel();
  if (!followsEnd(ctx, state)) cancelCheck(state);
  return lease;
}

/** Stops following every lease of the name, telling nobody (the service closes). */
export function untrackAll(ctx: ServiceContext, state: NameState): void {
  for (const lease of leasesOf(state)) untrack(ctx, state, lease.token);
}

/**
 * The lease `token` ended other than by its holder's release: the observer and the holder hear
 * it.
 */
export function lose(
  ctx: ServiceContext,
  state: NameState,
  token: bigint,
  reason: LostEvent['reason'],
): void {
  const lease = untrack(ctx, state, token);
  if (lease) tellLost(ctx, state.name, lease, reason);
}

/**
 * The lease `token` reached its cap on holding (`hold-cap.ts`) on a backend whose own lease may
 * run a little past it: its holder hears `maxHold`, and the backend's lease is ended.
 */
function endAtCap(ctx: ServiceContext, state: NameState, token: bigint): void {
  const lease = leaseOf(state, token);
  if (!lease || ctx.closed) return;
  lose(ctx, state, token, 'maxHold');
  ctx.calls.releaseQuietly(
    { name: state.name, owner: lease.owner, token, ttlMs: 0 },
    lease.keyHash,
  );
}

/** The observer and the holder of `lease` (no longer followed) hear that it was lost. */
export function tellLost(
  ctx: ServiceContext,
  name: string,
  lease: TrackedLease,
  reason: LostEvent['reason'],
): void {
  const event: LostEvent = { name, token: lease.token, reason: lostReason(ctx, lease, reason) };
  ctx.notify('lost', event);
  if (!lease.onLost) return;
  try {
    lease.onLost(event);
  } catch {
    // A listener's failure must not break the service.
  }
}

/** What a backend event means for the leases this service follows for the name. */
export function leaseHears(ctx: ServiceContext, state: NameState, event: LockEvent): void {
  if (state.leases === undefined) return;
  const { token } = event;
  if (token === undefined) return;
  if (event.type === 'acquired') {
    // Somebody else was granted it: the leases it could not be granted beside ended without
    // us seeing them end. An older grant's event may arrive late (events and replies travel
    // apart): `endOlder` only looks below its token.
    endOlder(ctx, state, token, event.mode ?? 'exclusive');
  } else if (event.type === 'expired' || event.type === 'revoked') {
    lose(ctx, state, token, event.type);
  } else if (event.type === 'released') {
    untrack(ctx, state, token);
  }
}
