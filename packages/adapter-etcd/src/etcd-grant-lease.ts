import { budget, DlmError, type QueueStep } from '@dlm/core';
import type { Etcd3, IKeyValue, ITxnResponse } from 'etcd3';
import type { Budget, RetryMode } from './etcd-calls.js';
import { carryDelayOf, delayLease } from './etcd-delay.js';
import { type Clamp, clampedGrant, endAtCap, holdLeftOf, unchanged } from './etcd-hold-cap.js';
import type { LeasePool, LockLease, ReservedLease } from './etcd-leases.js';
import { createdAt, type WaiterKeys } from './etcd-queue-txn.js';

/**
 * The fast path of a grant in etcd's queue: the lease its key goes on. A pooled lease is not
 * renewed before the transaction (this is the handoff path): when the lock was seen free (the
 * waiter slept on the holder), the renewal goes out with the transaction, one round trip fewer
 * between a release and the next grant; otherwise (it most likely finds the lock held) only once
 * the transaction took the lock. A grant is reported only once etcd confirmed the renewal,
 * counted from when it was sent; a transaction refused because the lease is gone is tried again
 * on a confirmed lease, and a key put on a lease whose renewal was not confirmed moves to
 * another lease first.
 */

export interface GrantLeaseContext {
  leases: LeasePool;
  commandTimeoutMs: number;
  /** The wall clock caps on holding are kept by (etcd-hold-cap.ts), in ms since the epoch. */
  wallClock(): number;
  txn(
    limit: Budget,
    mode: RetryMode,
    request: Parameters<Etcd3['kv']['txn']>[0],
  ): Promise<ITxnResponse>;
}

/** The lease a grant would use, and how to give it back when the grant did not happen. */
export interface GrantLease {
  lease: LockLease | ReservedLease;
  /** A pooled lease whose renewal is not confirmed yet. */
  early: ReservedLease | undefined;
  /** With a lock-delay: the lease its key goes on (etcd-delay.ts). */
  delay?: string | undefined;
  /** Gives the lease (and the delay's) back for reuse (once a renewal sent has settled). */
  giveBack(): void;
}

/**
 * `delayMs` (exclusive, above 0): the grant keeps a lock-delay, so its lease is a confirmed one
 * and the delay key's lease is taken after it (etcd-delay.ts): the delay then ends no earlier
 * than the lock's lease plus it.
 */
export async function leaseForGrant(
  context: GrantLeaseContext,
  limit: Budget,
  ttlMs: number,
  {
    confirmedOnly,
    renewNow,
    delayMs = 0,
  }: { confirmedOnly: boolean; renewNow: boolean; delayMs?: number },
): Promise<GrantLease> {
  const { leases } = context;
  const early = confirmedOnly || delayMs > 0 ? undefined : leases.reserve(ttlMs);
  const renewing = early && renewNow ? early.renew(limit) : undefined;
  const lease = early ?? (await leases.take(limit, ttlMs));
  let delay: string | undefined;
  if (delayMs > 0) {
    const lockLease = lease as LockLease;
    delay = await delayLease(leases, limit, delayMs, lockLease.ttlMs).then(
      (taken) => taken.id,
      (error: unknown) => {
        leases.detached(lease.id);
        throw error;
      },
    );
  }
  return {
    lease,
    early,
    delay,
    giveBack() {
      if (renewing) void renewing.then(() => leases.detached(lease.id));
      else leases.detached(lease.id);
      leases.detached(delay);
    },
  };
}

/**
 * The grant of `w`'s request at `token` on `lease`: its lease counts from when it was sent, up to
 * the cap on holding (a refresh's `clamp`, or a fresh grant's).
 */
function granted(w: WaiterKeys, token: string, lease: LockLease, clamp?: Clamp): QueueStep {
  const { name, owner } = w.request;
  const grant = {
    name,
    owner,
    token: BigInt(token),
    ...clampedGrant(lease.ttlMs, clamp, w.maxHoldMs),
  };
  return { kind: 'granted', grant, sentAt: lease.sentAt };
}

/**
 * We took the lock (`token`) on `lease`: report it once the lease is known to run its TTL from
 * a known moment. A pooled lease sent before its renewal was confirmed is renewed now if that was
 * not sent yet, and the grant counts from when it was sent.
 */
export async function reportGrant(
  context: GrantLeaseContext,
  limit: Budget,
  w: WaiterKeys,
  token: string,
  { lease, early }: Pick<GrantLease, 'lease' | 'early'>,
  clamp?: Clamp,
): Promise<QueueStep> {
  if (!early) return granted(w, token, lease as LockLease, clamp);
  const renewed = await early.renew(limit);
  return renewed ? granted(w, token, renewed) : moved(context, w, token, early.id);
}

/**
 * We took the lock on a pooled lease whose renewal etcd did not confirm: move the key to a
 * confirmed lease before reporting the grant. If the key is gone, it went with its lease and
 * the lock was never reported: look again.
 */
async function moved(
  context: GrantLeaseContext,
  w: WaiterKeys,
  token: string,
  unconfirmed: string,
): Promise<QueueStep> {
  const limit = budget('acquire', context.commandTimeoutMs);
  const ours = createdAt(w.grantKey, token);
  let lease: LockLease | undefined;
  let response: ITxnResponse;
  try {
    lease = await context.leases.take(limit, w.leaseTtlMs);
    const id = lease.id;
    response = await context.txn(limit, 'idempotent', {
      compare: [ours],
      // The value as the grant wrote it (a capped one keeps its cap; capped grants take
      // confirmed leases, so none is moved here today).
      success: [{ request_put: { key: w.grantKey, lease: id, ignore_value: true } }],
      failure: [],
    });
  } catch (error) {
    if (lease && !(error instanceof DlmError && error.details.indeterminate)) {
      context.leases.detached(lease.id);
    }
    // Not reported, so nobody will release it: give it back if etcd answers.
    void context
      .txn(budget('release', context.commandTimeoutMs), 'once', {
        compare: [ours],
        success: [{ request_delete_range: { key: w.grantKey } }],
        failure: [],
      })
      .catch(() => undefined);
    throw error;
  }
  if (!response.succeeded) {
    context.leases.detached(lease.id);
    return { kind: 'again' };
  }
  // Nothing of ours is left on the unconfirmed lease (not known any more: revoked).
  context.leases.detached(unconfirmed);
  return granted(w, token, lease);
}

/** A holder moved to a new lease by `refreshHolder`. */
export interface Refreshed {
  response: ITxnResponse;
  lease: GrantLease;
  /** The lease had a cap on holding: the new one is clamped to it. */
  clamp?: Clamp | undefined;
  /** The grant's `ttlMs` (and `holdRemainingMs`): the new lease, up to the cap. */
  granted: { ttlMs: number; holdRemainingMs?: number };
}

/**
 * The requester holds it in this mode and limit (`kv`, read at one revision): its holder key
 * moves to a new lease (same key and value, so the same token and cap) and, when queued, its
 * queue key goes, in one transaction. Undefined when the holder changed since the read. An
 * exclusive holder's lock-delay key (`delayKey`) then moves with its lease, before the grant is
 * reported: until then its old lease covers the lease the holder knew of. A lease with a cap on
 * holding (etcd-hold-cap.ts) gets a new lease of what is left to the cap at most, and at or past
 * the cap is ended instead (`capped`).
 */
export async function refreshHolder(
  context: GrantLeaseContext,
  limit: Budget,
  ttlMs: number,
  kv: IKeyValue,
  myKey: Buffer | undefined,
  delayKey?: Buffer,
): Promise<Refreshed | 'capped' | undefined> {
  const { leases } = context;
  const before = holdLeftOf(kv, context.wallClock());
  if (before !== undefined && before <= 0) {
    await endAtCap(context, limit, kv, delayKey);
    return 'capped';
  }
  const taken = await leases.take(limit, Math.min(ttlMs, before ?? ttlMs));
  const lease: GrantLease = {
    lease: taken,
    early: undefined,
    giveBack: () => leases.detached(taken.id),
  };
  // Read once the lease runs: the time left counted from no earlier than its start.
  const left = holdLeftOf(kv, context.wallClock());
  if (left !== undefined && left <= 0) {
    lease.giveBack();
    await endAtCap(context, limit, kv, delayKey);
    return 'capped';
  }
  let response: ITxnResponse;
  try {
    response = await context.txn(limit, 'idempotent', {
      compare: unchanged(kv),
      success: [
        { request_put: { key: kv.key, value: kv.value, lease: taken.id, prev_kv: true } },
        ...(myKey ? [{ request_delete_range: { key: myKey } }] : []),
      ],
      failure: [],
    });
  } catch (error) {
    if (!(error instanceof DlmError && error.details.indeterminate)) lease.giveBack();
    throw error;
  }
  if (!response.succeeded) {
    lease.giveBack();
    return undefined;
  }
  if (delayKey) await carryDelayOf(context, limit, delayKey, taken.ttlMs);
  const clamp = left === undefined ? undefined : { holdRemainingMs: left };
  return { response, lease, clamp, granted: clampedGrant(taken.ttlMs, clamp) };
}
