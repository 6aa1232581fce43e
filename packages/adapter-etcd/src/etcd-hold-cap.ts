import type { AcquireRequest } from '@dlm/core';
import type { ICompare, IKeyValue } from 'etcd3';
import type { Budget } from './etcd-calls.js';
import { carryDelay, type DelayContext } from './etcd-delay.js';
import { capOfValue, type HoldCap } from './etcd-value.js';

/**
 * Caps on holding (`AcquireRequest.maxHoldMs`) on etcd. etcd's transactions have no clock, and
 * its lease clock can only run late (a new leader restarts every lease's full TTL), so the cap
 * is a wall-clock time: the granting dlm server's `Date.now()` plus `maxHoldMs`, written in the
 * lock key's value with the grant (etcd-value.ts), in the same transaction. It travels with the
 * key: every step that puts the key on a new lease (an extend, the try-lock's idempotent
 * re-acquire, the queue's refresh of the requester's own holder) reads it first, on whichever
 * dlm server acts, and clamps by that server's wall clock: the new lease is at most what is
 * left to the cap, and at or past the cap the key is deleted (the lease ends; watchers see an
 * expiry) instead. The clamping write compares the value it read (and the create revision), so
 * it applies to the lease it read or not at all; it puts that same value back, so no rewrite
 * drops the cap. The fast paths (a put that does not read first) only apply to a value without
 * a cap: the comparisons tell the two apart (`uncappedCompares`, or a whole-value equality).
 *
 * So the servers' wall clocks must agree: an extend through a server whose clock is `d` behind
 * the granting one's may keep the lease up to `d` past the cap, one `d` ahead ends it up to `d`
 * early. And etcd's leases are whole seconds (at least `minTtlMs`): a clamped lease may outlast
 * its cap by up to that rounding; core ends it at the cap on the server that follows it.
 */

/** How a step that puts a capped lease's key on a new lease was clamped. */
export interface Clamp {
  /**
   * The time left to the cap, read once the new lease ran and before the step was sent: the
   * lease reported is no longer (its etcd lease may be, by whole seconds).
   */
  holdRemainingMs: number;
}

/** The cap an exclusive grant asked for, counted from `wallNowMs` (before its transaction). */
export function capOfRequest(request: AcquireRequest, wallNowMs: number): HoldCap | undefined {
  const { maxHoldMs } = request;
  if (maxHoldMs === undefined || request.mode === 'shared') return undefined;
  return { capAtMs: wallNowMs + maxHoldMs, maxHoldMs };
}

/** The time left to the cap of the lease whose key reads `kv`; undefined: it has none. */
export function holdLeftOf(kv: IKeyValue, wallNowMs: number): number | undefined {
  const cap = capOfValue(kv.value);
  return cap === undefined ? undefined : cap.capAtMs - wallNowMs;
}

/**
 * A grant's `ttlMs` (and `holdRemainingMs`) on a lease of `ttlMs`: never past the cap, whether
 * a clamped step's (`clamp`) or a fresh grant's (`maxHoldMs`).
 */
export function clampedGrant(
  ttlMs: number,
  clamp: Clamp | undefined,
  maxHoldMs?: number | undefined,
): { ttlMs: number; holdRemainingMs?: number } {
  if (clamp) {
    const { holdRemainingMs } = clamp;
    return { ttlMs: Math.min(ttlMs, holdRemainingMs), holdRemainingMs };
  }
  return { ttlMs: maxHoldMs === undefined ? ttlMs : Math.min(ttlMs, maxHoldMs) };
}

/**
 * Compares that hold while the key read as `kv` is the same lease (create revision) with the
 * same value (owner, key hash and cap): a clamping write applies to what it read, or not at all.
 */
export function unchanged(kv: IKeyValue): ICompare[] {
  return [
    { key: kv.key, target: 'Create', result: 'Equal', create_revision: kv.create_revision },
    { key: kv.key, target: 'Value', result: 'Equal', value: kv.value },
  ];
}

/**
 * The lease read as `kv` is at or past its cap: end it (delete the key, if it is still the one
 * read), as its expiry would. Its lock-delay (the key `delayKey`) then runs from now, as after a
 * revocation (a failure to move it leaves it on its old lease, which ends later still).
 */
export async function endAtCap(
  context: DelayContext,
  limit: Budget,
  kv: IKeyValue,
  delayKey: Buffer | undefined,
): Promise<void> {
  const response = await context.txn(limit, 'idempotent', {
    compare: unchanged(kv),
    success: [
      { request_delete_range: { key: kv.key, prev_kv: true } },
      ...(delayKey ? [{ request_range: { key: delayKey } }] : []),
    ],
    failure: [],
  });
  if (!response.succeeded) return;
  context.leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
  const delayed = response.responses[1]?.response_range.kvs[0];
  if (delayed) await carryDelay(context, limit, delayed).catch(() => undefined);
}
