import { DlmError } from '@dlm/core';
import type { Etcd3, ICompare, IKeyValue, IRequestOp, IResponseOp, ITxnResponse } from 'etcd3';
import type { Budget, RetryMode } from './etcd-calls.js';
import type { EtcdKeys } from './etcd-keys.js';
import type { LeasePool, LockLease } from './etcd-leases.js';

/**
 * Lock-delays on etcd (`AcquireRequest.lockDelayMs`). etcd's transactions have no clock, but its
 * leases do: the delay is the key `<prefix>delay/<name>` (value: the delay in ms) on a lease of
 * its own, and every grant of the name, in either mode, compares it absent (create revision 0) in
 * its transaction. So the name is free of delay exactly when etcd's lessor has ended that lease
 * (or a release deleted the key), whichever dlm server asks.
 *
 * - A grant that asks for a delay puts the key, in the grant's transaction, on a lease of the
 *   lock lease's TTL plus the delay, rounded UP to whole seconds, taken only once the lock's lease
 *   was granted or renewed: it starts no earlier than the lock's lease, so it ends no earlier than
 *   the lock's lease's end plus the delay (while held, the lock key keeps the name anyway).
 * - A release deletes it in the release's transaction: no delay.
 * - An expiry needs no step: the delay key outlives the lock key by at least the delay.
 * - A revocation moves it, after the revoking transaction answered, to a lease of the delay
 *   (rounded up): that lease starts after the revocation. Until the move, its old lease (the
 *   lease's end plus the delay, later still) holds the name.
 * - An extend (or a refresh) moves it the same way onto a lease taken after the lock's new one.
 *   Until then the old delay lease still covers the lease the holder was told about.
 *
 * How late a waiter can be: the delay lease ends up to a second after the delay's true end
 * (whole seconds), and etcd's lessor revokes an expired lease up to 500 ms after it ran out (it
 * checks twice a second), plus one Raft commit; the key's deletion then reaches waiters through
 * the prefix watch. Never early: a lease's TTL is counted by etcd's leader from when it granted
 * or renewed it, which is after the lock's lease (or the revocation) was. The clock assumption is
 * etcd's own: the leader's monotonic clock; a new leader restarts every lease's full TTL, which
 * only makes the delay longer.
 */

/** The delay key's value: the delay in ms. */
export const delayValue = (delayMs: number): Buffer => Buffer.from(String(delayMs));

/** The delay in ms a delay key holds (0 when unreadable). */
export function delayOfValue(value: Buffer): number {
  const delayMs = Number(value.toString());
  return Number.isSafeInteger(delayMs) && delayMs > 0 ? delayMs : 0;
}

/** Compare: `name` is in no lock-delay (its delay key is absent). */
export const noDelay = (keys: EtcdKeys, name: string): ICompare => ({
  key: keys.delay(name),
  target: 'Create',
  result: 'Equal',
  create_revision: 0,
});

export const readDelay = (keys: EtcdKeys, name: string): IRequestOp => ({
  request_range: { key: keys.delay(name) },
});

/**
 * The lease a delay key goes on: `ttlMs` plus the delay, rounded up to whole seconds by the pool.
 * Take it only once the lease it must outlive (the lock's, or the revocation) is in place.
 */
export function delayLease(
  leases: LeasePool,
  limit: Budget,
  delayMs: number,
  ttlMs = 0,
): Promise<LockLease> {
  return leases.take(limit, ttlMs + delayMs);
}

/**
 * The write that keeps a grant's (or a refresh's) delay with it: the key on `lease` with the
 * request's delay, or, without one, the key deleted (a refresh without a delay drops it).
 */
export function keepDelay(
  keys: EtcdKeys,
  name: string,
  delayMs: number,
  lease: string | undefined,
): IRequestOp {
  const key = keys.delay(name);
  return delayMs > 0 && lease !== undefined
    ? { request_put: { key, value: delayValue(delayMs), lease, prev_kv: true } }
    : { request_delete_range: { key, prev_kv: true } };
}

/** What moving a delay key needs: the lease pool and a transaction sender. */
export interface DelayContext {
  leases: LeasePool;
  txn(
    limit: Budget,
    mode: RetryMode,
    request: Parameters<Etcd3['kv']['txn']>[0],
  ): Promise<ITxnResponse>;
}

/**
 * Moves the delay key read as `kv` onto a lease of `ttlMs` plus its delay, taken now (after the
 * write it must outlive answered: an extend's or refresh's, or a revocation, with `ttlMs` 0); a
 * key changed since (a release, a new grant) stays as it is.
 */
export async function carryDelay(
  context: DelayContext,
  limit: Budget,
  kv: IKeyValue,
  ttlMs = 0,
): Promise<void> {
  const delayMs = delayOfValue(kv.value);
  if (delayMs === 0) return;
  const lease = await delayLease(context.leases, limit, delayMs, ttlMs);
  let moved: ITxnResponse;
  try {
    moved = await context.txn(limit, 'idempotent', {
      compare: [{ key: kv.key, target: 'Mod', result: 'Equal', mod_revision: kv.mod_revision }],
      success: [
        { request_put: { key: kv.key, lease: lease.id, ignore_value: true, prev_kv: true } },
      ],
      failure: [],
    });
  } catch (error) {
    if (!(error instanceof DlmError && error.details.indeterminate))
      context.leases.detached(lease.id);
    throw error;
  }
  const previous = moved.succeeded ? moved.responses[0]?.response_put.prev_kv : undefined;
  if (!moved.succeeded) context.leases.detached(lease.id);
  else if (previous && previous.lease !== lease.id) context.leases.detached(previous.lease);
}

/** Reads the delay key `key` and, when there is one, carries it (see `carryDelay`). */
export async function carryDelayOf(
  context: DelayContext,
  limit: Budget,
  key: Buffer,
  ttlMs: number,
): Promise<void> {
  const read = await context.txn(limit, 'idempotent', {
    compare: [],
    success: [{ request_range: { key } }],
    failure: [],
  });
  const kv = read.responses[0]?.response_range.kvs[0];
  if (kv) await carryDelay(context, limit, kv, ttlMs);
}

/** The lease a put's or delete's previous key was on goes back to the pool, unless it is `kept`. */
export function detachPrevious(
  leases: LeasePool,
  op: IResponseOp | undefined,
  kept: string | undefined,
): void {
  const previous = op?.response_put?.prev_kv ?? op?.response_delete_range?.prev_kvs[0];
  if (previous && previous.lease !== kept) leases.detached(previous.lease);
}

/**
 * How long a delay key read as `kv` holds the name yet, from its lease's remaining time (whole
 * seconds on etcd's side, so an upper end), never above the delay itself, at least 1 while the
 * key is there.
 */
export function delayLeftMs(kv: IKeyValue, leaseLeftMs: number | undefined): number {
  const delayMs = delayOfValue(kv.value);
  const left = Math.min(leaseLeftMs ?? delayMs, delayMs > 0 ? delayMs : Number.POSITIVE_INFINITY);
  return Math.max(1, Number.isFinite(left) ? left : 1);
}
