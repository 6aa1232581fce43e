import {
  type AcquireRequest,
  aheadOf,
  type GrantDecision,
  type RuleHolders,
  type RuleRequest,
} from '@dlm/core';
import type { IKeyValue, IResponseOp, ITxnResponse } from 'etcd3';
import { delayLeftMs } from './etcd-delay.js';
import { type Place, specOfEntry, type WaiterKeys } from './etcd-queue-txn.js';
import { isOwnValue, limitOfValue, ownerOfValue } from './etcd-value.js';

// What a join or look that did not grant read (etcd-queue-txn.ts's failure branch), and what
// core's grant rule makes of it: the holders, the entries ahead, the entry a wait sleeps on.

/** What a failed transaction read, at one revision. */
export interface View {
  revision: string;
  /** Our queue key is gone (its lease ended): we are no longer queued. */
  gone: boolean;
  /** When joining: our queue key's create revision. */
  myRevision: bigint | undefined;
  lock: IKeyValue | undefined;
  mine: IKeyValue | undefined;
  oldest: IKeyValue | undefined;
  sharedCount: number;
  /** Queue keys ahead of ours, oldest first (an exclusive request reads the nearest only). */
  ahead: string[];
  /** A join's retried put: others joined in between, so the view does not show our neighbour. */
  unplaced: boolean;
  /** The name's lock-delay key, when it has one. */
  delay: IKeyValue | undefined;
}

/** The view from a failed `lookTxn` (its failure branch, nested when joining). */
export function viewOf(w: WaiterKeys, place: Place, response: ITxnResponse): View {
  const nested = response.responses[0]?.response_txn;
  let ops: IResponseOp[] = nested ? nested.responses : response.responses;
  if (!place.queued) ops = ops.slice(1);
  const range = (i: number) => ops[i]?.response_range;
  const queue = (range(3)?.kvs ?? []).map((kv) => kv.key.toString());
  const myKey = place.myKey.toString();
  const mineInQueue = range(4)?.kvs[0];
  let ahead = queue;
  let unplaced = false;
  if (!place.queued && w.rule.mode === 'shared')
    ahead = queue.slice(0, Math.max(0, queue.indexOf(myKey)));
  else if (!place.queued) {
    // Joining, exclusive: the newest two keys, ours first unless a retried put came late.
    unplaced = queue[0] !== myKey;
    ahead = queue.slice(1, 2);
  }
  return {
    revision: response.header.revision,
    gone: !mineInQueue,
    myRevision: mineInQueue ? BigInt(mineInQueue.create_revision) : undefined,
    lock: range(0)?.kvs[0],
    mine: range(1)?.kvs[0],
    oldest: range(2)?.kvs[0],
    sharedCount: Number(range(2)?.count ?? 0),
    ahead,
    unplaced,
    delay: range(5)?.kvs[0],
  };
}

/**
 * A shared holder key of our key hash held by another owner (a copied owner label): another
 * requester, whose key this one cannot take. It is waited for like a holder.
 */
export function takenByAnother(view: Pick<View, 'mine'>, request: AcquireRequest): boolean {
  return (
    request.mode === 'shared' &&
    view.mine !== undefined &&
    ownerOfValue(view.mine.value) !== request.owner
  );
}

/** The holders as core's grant rule reads them, from a view (shared or exclusive). */
export function ruleHoldersOf(
  view: Pick<View, 'lock' | 'mine' | 'oldest' | 'sharedCount'> & Partial<Pick<View, 'delay'>>,
  request: AcquireRequest,
): RuleHolders {
  const { lock, mine, oldest } = view;
  if (lock) {
    // Ours with any cap on holding: a capped one is refreshed by a clamping write.
    const own = isOwnValue(lock.value, request.owner, request.keyHash);
    return { count: 1, mode: 'exclusive', own: own ? { mode: 'exclusive', limit: 1 } : undefined };
  }
  if (view.sharedCount === 0) {
    // The delay's exact time left matters only for a wait (its lease's remaining time then).
    return view.delay
      ? { count: 0, lockDelayRemainingMs: delayLeftMs(view.delay, undefined) }
      : { count: 0 };
  }
  // Another owner with our key hash is another requester, whose key this one cannot use.
  const own = mine && ownerOfValue(mine.value) === request.owner ? mine : undefined;
  return {
    count: view.sharedCount,
    mode: 'shared',
    limit: oldest ? limitOfValue(oldest.value) : undefined,
    own: own && { mode: 'shared', limit: limitOfValue(own.value) },
  };
}

/** The rule's `ahead`, and the keys of the entries it may wait for. */
export function aheadOfView(rule: RuleRequest, ahead: readonly string[]) {
  return aheadOf(rule, ahead.map(specOfEntry));
}

/** The queue key a `wait` on an entry sleeps on. */
export function entryWaitedOn(
  decision: Extract<GrantDecision, { kind: 'wait'; on: 'entry' }>,
  ahead: readonly string[],
  lastBlocking: number | undefined,
): string {
  return decision.entry === 'nearest' ? ahead.at(-1)! : ahead[lastBlocking!]!;
}
