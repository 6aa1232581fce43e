import type { Grant } from './backend.js';
import { DlmError } from './errors.js';
import { MAX_TOKEN } from './fencing.js';
import { createLeaseKey, hashLeaseKey } from './lease-key.js';
import { type LeaseSpec, leaseOf, leasesOf, type TrackedLease } from './lease-tracking.js';
import type { Lease } from './lock-service.js';
import type { NameState, ServiceContext } from './name-state.js';
import { type LockMode, validateLeaseKey } from './validation.js';

/** A lease key and its hash, as a holder presents them. */
export interface Proof {
  leaseKey: string;
  keyHash: string;
}

/** The lease the caller gets: the grant with its key (which only the caller ever sees). */
export function toLease(grant: Grant, leaseKey: string, { mode, limit }: LeaseSpec): Lease {
  const lease: Lease = {
    name: grant.name,
    owner: grant.owner,
    token: grant.token,
    ttlMs: grant.ttlMs,
    mode,
    leaseKey,
  };
  if (mode === 'shared') lease.limit = limit;
  return lease;
}

export function checkToken(token: bigint): bigint {
  if (typeof token !== 'bigint' || token < 1n || token > MAX_TOKEN) {
    throw new DlmError('INVALID_PARAMS', 'token must be an integer in [1, 2^63-1]', {
      field: 'token',
    });
  }
  return token;
}

/**
 * The key an acquire presents: the caller's, else that of a lease this service already holds
 * for `owner` (in `mode`, if it has one in it), else a fresh one. `holder`: the lease with that
 * key, whose re-acquire neither waits nor queues (the same grant refreshed, or a conflict when
 * asked in the other mode).
 */
export function acquireProof(
  state: NameState,
  owner: string,
  givenKey: string | undefined,
  mode: LockMode,
): Proof & { holder: TrackedLease | undefined } {
  let tracked: TrackedLease | undefined;
  for (const lease of leasesOf(state)) {
    if (lease.owner !== owner) continue;
    if (givenKey !== undefined ? lease.leaseKey === givenKey : !tracked || lease.mode === mode) {
      tracked = lease;
    }
  }
  const leaseKey = givenKey ?? tracked?.leaseKey ?? createLeaseKey();
  const keyHash =
    tracked && leaseKey === tracked.leaseKey ? tracked.keyHash : hashLeaseKey(leaseKey);
  return { leaseKey, keyHash, holder: tracked?.keyHash === keyHash ? tracked : undefined };
}

/**
 * The key hash a release or extend presents: from the caller's key, or, without one, from the
 * lease this service granted with `token` (its own caller). Null: no proof at all.
 */
export function proofOf(
  ctx: ServiceContext,
  name: string,
  token: bigint,
  leaseKey: unknown,
): Proof | null {
  const state = ctx.names.get(name);
  const ours = state ? leaseOf(state, token) : undefined;
  if (leaseKey === undefined) return ours ?? null;
  // The key of the lease this service tracks: its hash is known (no SHA-256 per release).
  if (ours && leaseKey === ours.leaseKey) return ours;
  const key = validateLeaseKey(leaseKey);
  return { leaseKey: key, keyHash: hashLeaseKey(key) };
}
