import type { ICompare, IKeyValue, IRequestOp, IResponseOp } from 'etcd3';
import { type EtcdKeys, prefixEnd } from './etcd-keys.js';

/**
 * Shared holders (read locks, semaphores) on etcd.
 *
 * Each shared holder is its own key, `<prefix>shared/<name>\0k<keyHash>` (etcd-keys.ts), on its
 * own lease, valued `<limit>\n<owner>`; its create revision is its token, so tokens are
 * strict and global: a writer's token is above every earlier reader's and the other way round.
 * An exclusive holder stays the one lock key `<prefix>lock/<name>`.
 *
 * Why a grant is atomic without a counter: etcd's comparisons cannot count the keys of a range,
 * so a shared grant is two requests. A read (one read-only transaction, one revision R) returns
 * the exclusive holder, the caller's own holder key, the oldest shared holder (whose limit is
 * everyone's, since they all agree) and the number of shared holders. If that leaves room, the
 * grant is one transaction whose comparisons make the decision hold at commit: the lock key is
 * free, and every key of the name's holder range has a mod revision ≤ R. Holders can only have
 * left since R (a new or re-put holder key would carry a later mod revision), so at commit the
 * holders are a subset of those counted: fewer than `limit`, all with our limit. A failed
 * comparison means someone else's grant (or refresh) got in: read again. Each retry follows
 * someone's progress, so contending try-locks settle within a few rounds.
 *
 * The exclusive side needs one more comparison and no more requests: its grant also requires
 * the holder range to be empty ("Create == 0" over a range holds when no key is in it). So
 * never is an exclusive holder beside a shared one (S7), and the exclusive path keeps its
 * round trips.
 */

/** What one read of a name showed a shared request, at revision `revision`. */
export interface SharedView {
  revision: string;
  /** The exclusive holder. */
  lock: IKeyValue | undefined;
  /** The request's own holder key (same owner and key hash). */
  mine: IKeyValue | undefined;
  /** The shared holder with the lowest token. */
  oldest: IKeyValue | undefined;
  /** How many shared holders there are. */
  holders: number;
}

export interface SharedRequest {
  name: string;
  owner: string;
  keyHash: string | undefined;
  limit: number;
}

/** The reads of a {@link SharedView}, as operations of one read-only transaction. */
export function sharedReads(keys: EtcdKeys, request: SharedRequest): IRequestOp[] {
  return [
    { request_range: { key: keys.lock(request.name) } },
    { request_range: { key: keys.sharedHolder(request.name, request.owner, request.keyHash) } },
    // `count` is the whole range's, whatever the limit.
    oldestSharedHolder(keys, request.name),
  ];
}

/** Reads the shared holder of `name` with the lowest token (the oldest), when there is one. */
export function oldestSharedHolder(keys: EtcdKeys, name: string): IRequestOp {
  const start = keys.shared(name);
  return {
    request_range: {
      key: start,
      range_end: prefixEnd(start),
      sort_order: 'Ascend',
      sort_target: 'Create',
      limit: 1,
    },
  };
}

/** The view from the responses of {@link sharedReads}, starting at `offset`. */
export function sharedView(responses: IResponseOp[], offset: number, revision: string): SharedView {
  const holders = responses[offset + 2]?.response_range;
  return {
    revision,
    lock: responses[offset]?.response_range.kvs[0],
    mine: responses[offset + 1]?.response_range.kvs[0],
    oldest: holders?.kvs[0],
    holders: Number(holders?.count ?? 0),
  };
}

/** The comparisons under which a grant (core's `decideGrant`) still holds at commit. */
export function sharedGrantCompares(keys: EtcdKeys, name: string, view: SharedView): ICompare[] {
  const start = keys.shared(name);
  return [
    { key: keys.lock(name), target: 'Create', result: 'Equal', create_revision: 0 },
    {
      key: start,
      range_end: prefixEnd(start),
      target: 'Mod',
      result: 'Less',
      mod_revision: (BigInt(view.revision) + 1n).toString(),
    },
  ];
}

/** The comparisons under which a refresh still holds at commit. */
export function sharedRefreshCompares(kv: IKeyValue): ICompare[] {
  return [
    { key: kv.key, target: 'Create', result: 'Equal', create_revision: kv.create_revision },
    { key: kv.key, target: 'Value', result: 'Equal', value: kv.value },
  ];
}

/** For an exclusive request's transaction: no shared holder of `name` exists. */
export function noSharedHolder(keys: EtcdKeys, name: string): ICompare {
  const start = keys.shared(name);
  return {
    key: start,
    range_end: prefixEnd(start),
    target: 'Create',
    result: 'Equal',
    create_revision: 0,
  };
}
