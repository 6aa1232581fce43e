import type { AcquireRequest, RuleRequest } from '@dlm/core';
import type { ICompare, IRequestOp, ITxnRequest } from 'etcd3';
import { keepDelay } from './etcd-delay.js';
import { capOfRequest } from './etcd-hold-cap.js';
import { type EtcdKeys, prefixEnd } from './etcd-keys.js';
import { oldestSharedHolder } from './etcd-shared.js';
import { holderValue, sharedValue } from './etcd-value.js';

/**
 * The one transaction of a join or a look in etcd's queue, for either mode (the mode is a
 * parameter of its comparisons, its keys and its reads): when its comparisons hold, it grants
 * (and leaves the queue); else it reads the view the grant rule decides on (core's
 * `decideGrant`, through etcd-queue-view.ts), all at one revision:
 *
 * - join: granted when nobody holds the name and nobody queues for it; else the requester's own
 *   holder refreshed (the same owner and key in that mode); else its queue key put, with the view.
 * - look, exclusive: granted when its queue key is still there at its revision (its wait's lease
 *   did not end while it slept: the check etcd's lock service lacked, etcd-io/etcd#11456),
 *   nobody older queues, and nobody holds the name.
 * - look, shared: etcd's comparisons cannot count holders, so the rule decides on a read first;
 *   once it said "grant", the next look's transaction needs only the lock key free and its queue
 *   key still there (no comparison on the holders, so that shared waiters woken together are
 *   granted together instead of failing each other's). Why the limit still holds: take the
 *   holder whose place is latest (its entry's create revision). Every other holder was ahead of
 *   it, so when it read, each was already a holder or an entry ahead of it with its limit (an
 *   entry with another limit ahead makes it wait; a grant turns an entry into a holder in one
 *   transaction), and it counted them all and found fewer than the limit. The same argument lets
 *   a shared waiter kept out only by an exclusive holder be "decided" before that holder ends
 *   (etcd-shared-room.ts): its end, not a read, is what it waits for.
 */

/** One waiter's keys and request, as its transactions need them. */
export interface WaiterKeys {
  readonly request: AcquireRequest;
  readonly rule: RuleRequest;
  /**
   * The key a grant puts (the lock key, or the shared holder key) and its value, without a cap
   * on holding (a fresh capped grant's carries its cap: `grantValueAt`).
   */
  readonly grantKey: Buffer;
  readonly grantValue: Buffer;
  readonly lockKey: Buffer;
  /** The requester's shared holder key (same owner and key hash). */
  readonly holderKey: Buffer;
  readonly queueStart: Buffer;
  readonly queueEnd: Buffer;
  /** The lease a grant asks for: the request's, raised to etcd's shortest. */
  readonly leaseTtlMs: number;
  /** The name's lock-delay key (etcd-delay.ts): a grant of either mode needs it absent. */
  readonly delayKey: Buffer;
  /** Exclusive only, above 0: the lock-delay the grant keeps with it. */
  readonly delayMs: number;
  /** Exclusive only: the cap on holding a fresh grant keeps with it (etcd-hold-cap.ts). */
  readonly maxHoldMs: number | undefined;
}

export function waiterKeys(keys: EtcdKeys, request: AcquireRequest, minTtlMs: number): WaiterKeys {
  const { name, owner, keyHash } = request;
  const shared = request.mode === 'shared';
  const limit = shared ? (request.limit ?? 1) : 1;
  const lockKey = keys.lock(name);
  const holderKey = keys.sharedHolder(name, owner, keyHash);
  const queueStart = keys.queue(name);
  return {
    request,
    rule: { mode: shared ? 'shared' : 'exclusive', limit },
    grantKey: shared ? holderKey : lockKey,
    grantValue: shared ? sharedValue(limit, owner) : holderValue(owner, keyHash),
    lockKey,
    holderKey,
    queueStart,
    queueEnd: prefixEnd(queueStart),
    leaseTtlMs: Math.max(request.ttlMs, minTtlMs),
    delayKey: keys.delay(name),
    delayMs: shared ? 0 : (request.lockDelayMs ?? 0),
    maxHoldMs: shared ? undefined : request.maxHoldMs,
  };
}

/** The value a fresh grant of `w` puts: with its cap on holding counted from `wallNowMs`. */
export function grantValueAt(w: WaiterKeys, wallNowMs: number): Buffer {
  const cap = capOfRequest(w.request, wallNowMs);
  return cap ? holderValue(w.request.owner, w.request.keyHash, cap) : w.grantValue;
}

/** A queue entry's id: `s<limit>.<random>` for a shared request, `<random>` for an exclusive one. */
export function entryId(rule: RuleRequest, random: string): string {
  return rule.mode === 'shared' ? `s${rule.limit}.${random}` : random;
}

/** A queue key's mode and limit, from its id (see `entryId`). */
export function specOfEntry(key: string): RuleRequest {
  const start = key.lastIndexOf('\0') + 1;
  if (key[start] !== 's') return { mode: 'exclusive', limit: 1 };
  return { mode: 'shared', limit: Number(key.slice(start + 1, key.indexOf('.', start))) };
}

const free = (key: Buffer): ICompare => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: 0,
});

export const createdAt = (key: Buffer, revision: string): ICompare => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: revision,
});

/** Nothing has a negative create revision: a transaction that only reads. */
export const NEVER = (key: Buffer): ICompare => ({
  key,
  target: 'Create',
  result: 'Less',
  create_revision: 0,
});

/** Where a waiter is: not queued yet (join), or queued at `revision` (`decided`: shared may take). */
export type Place =
  | { queued: false; myKey: Buffer }
  | { queued: true; myKey: Buffer; revision: bigint; decided: boolean };

/** The comparisons under which granting now is right (see the top of this file). */
function grantCompares(keys: EtcdKeys, w: WaiterKeys, place: Place): ICompare[] {
  const { lockKey, queueStart, queueEnd, request } = w;
  const noShared = Object.assign({}, free(keys.shared(request.name)), {
    range_end: prefixEnd(keys.shared(request.name)),
  });
  // Not in a lock-delay: a grant of either mode needs the delay key absent (etcd-delay.ts).
  const noDelay = free(w.delayKey);
  if (!place.queued) {
    return [
      free(lockKey),
      noShared,
      Object.assign({}, free(queueStart), { range_end: queueEnd }),
      noDelay,
    ];
  }
  const mine = createdAt(place.myKey, place.revision.toString());
  // Shared: our holder key is free too (another owner with our key hash holds it otherwise).
  if (w.rule.mode === 'shared')
    return place.decided ? [free(lockKey), mine, free(w.holderKey), noDelay] : [NEVER(lockKey)];
  const nobodyOlder: ICompare = {
    key: queueStart,
    range_end: queueEnd,
    target: 'Create',
    result: 'Greater',
    create_revision: (place.revision - 1n).toString(),
  };
  return [mine, nobodyOlder, free(lockKey), noShared, noDelay];
}

/** The reads of the view, after what the failure branch writes (a join's own queue key). */
function viewReads(keys: EtcdKeys, w: WaiterKeys, place: Place): IRequestOp[] {
  const shared = w.rule.mode === 'shared';
  const ahead: IRequestOp = {
    request_range: {
      key: w.queueStart,
      range_end: w.queueEnd,
      // Queued: only the entries before ours; an exclusive request needs only the nearest.
      ...(place.queued ? { max_create_revision: (place.revision - 1n).toString() } : {}),
      sort_order: shared ? 'Ascend' : 'Descend',
      sort_target: 'Create',
      ...(shared ? {} : { limit: place.queued ? 1 : 2 }),
      keys_only: true,
    },
  };
  return [
    { request_range: { key: w.lockKey } },
    { request_range: { key: w.holderKey } },
    oldestSharedHolder(keys, w.request.name),
    ahead,
    { request_range: { key: place.myKey, keys_only: true } },
    { request_range: { key: w.delayKey } },
  ];
}

/**
 * The one transaction (see the top of this file); `lease`: the lease a grant puts its key on,
 * `delayLease`: the one an exclusive grant with a lock-delay puts the delay key on, `value`: the
 * value a fresh grant puts (`grantValueAt`). The requester's own holder is refreshed here only
 * when it has no cap on holding (its value is `grantValue`); a capped one is read and clamped
 * (`refreshHolder`).
 */
export function lookTxn(
  keys: EtcdKeys,
  w: WaiterKeys,
  place: Place,
  lease: string | undefined,
  sessionLease: string | undefined,
  delayLease?: string,
  value: Buffer = w.grantValue,
): ITxnRequest {
  const compare = grantCompares(keys, w, place);
  const joining: IRequestOp[] =
    place.queued || sessionLease === undefined
      ? []
      : [{ request_put: { key: place.myKey, value: w.grantValue, lease: sessionLease } }];
  const reads = [...joining, ...viewReads(keys, w, place)];
  if (lease === undefined) return { compare, success: [], failure: reads };
  const putOf = (written: Buffer): IRequestOp => ({
    request_put: { key: w.grantKey, value: written, lease, prev_kv: true },
  });
  const put = putOf(value);
  // The grant's lock-delay, kept with it; an exclusive refresh keeps (or drops) its own too.
  const exclusive = w.rule.mode === 'exclusive';
  const delay = keepDelay(keys, w.request.name, w.delayMs, delayLease);
  const delayed = exclusive && w.delayMs > 0 ? [delay] : [];
  if (place.queued) {
    return {
      compare,
      success: [put, ...delayed, { request_delete_range: { key: place.myKey } }],
      failure: reads,
    };
  }
  // The requester's own holder: refreshed on the new lease (same key, so the same token).
  const own: ICompare = { key: w.grantKey, target: 'Value', result: 'Equal', value: w.grantValue };
  const refresh = exclusive ? [putOf(w.grantValue), delay] : [putOf(w.grantValue)];
  return {
    compare,
    success: [put, ...delayed],
    failure: [{ request_txn: { compare: [own], success: refresh, failure: reads } }],
  };
}
