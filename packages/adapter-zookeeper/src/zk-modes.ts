import type { LockConflict } from '@dlm/core';
import { type Current, isOwnLease } from './zk-locks.js';
import { type EntrySpec, specOf } from './zk-paths.js';

/** A holder whose lease still runs, with how much of it is left. */
export interface LiveHolder {
  holder: Current;
  remainingMs: number;
}

/** What the holders of a name say about a request (see `judge`). */
export type Verdict =
  /** The requester already holds it in this mode and limit: refresh that lease. */
  | { kind: 'own'; holder: Current }
  | { kind: 'conflict'; conflict: LockConflict }
  /** Room for it among the holders (the queue may still come first). */
  | { kind: 'room' }
  /** Blocked until one of `blockers` ends; `ttlRemainingMs`: the end that would let it in. */
  | { kind: 'blocked'; ttlRemainingMs: number; blockers: LiveHolder[] };

/**
 * The holder rules of the backend contract, over the holders whose leases still run: the same
 * owner and key in the same mode and limit is that lease again, in the other mode a conflict;
 * shared holders with another limit are a conflict for a shared request; shared gets in beside
 * fewer than `limit` shared holders (`ahead`: shared waiters to be served first take room too),
 * exclusive only when nobody holds. Blocked: exclusive waits for the latest end of a blocker,
 * shared at its limit for the soonest.
 */
export function judge(
  request: { owner: string; keyHash: string | undefined },
  spec: EntrySpec,
  live: LiveHolder[],
  ahead = 0,
): Verdict {
  const own = live.find(({ holder }) => isOwnLease(holder, request.owner, request.keyHash));
  if (own) {
    if (own.holder.mode !== spec.mode) return { kind: 'conflict', conflict: { field: 'mode' } };
    if (spec.mode === 'shared' && own.holder.limit !== spec.limit) {
      return { kind: 'conflict', conflict: { field: 'limit', limit: own.holder.limit } };
    }
    return { kind: 'own', holder: own.holder };
  }
  if (spec.mode === 'exclusive') {
    return live.length ? blocked(live, 'latest') : { kind: 'room' };
  }
  const exclusive = live.filter(({ holder }) => holder.mode === 'exclusive');
  if (exclusive.length) return blocked(exclusive, 'latest');
  const other = live.find(({ holder }) => holder.limit !== spec.limit);
  if (other) return { kind: 'conflict', conflict: { field: 'limit', limit: other.holder.limit } };
  return live.length + ahead >= spec.limit ? blocked(live, 'soonest') : { kind: 'room' };
}

function blocked(blockers: LiveHolder[], which: 'latest' | 'soonest'): Verdict {
  const ends = blockers.map(({ remainingMs }) => remainingMs);
  const ttlRemainingMs = blockers.length
    ? which === 'latest'
      ? Math.max(...ends)
      : Math.min(...ends)
    : 0;
  return { kind: 'blocked', ttlRemainingMs, blockers };
}

/** The request's mode and limit as the backend stores it (absent mode: exclusive). */
export function specOfRequest(request: {
  mode?: string | undefined;
  limit?: number | undefined;
}): EntrySpec {
  return request.mode === 'shared'
    ? { mode: 'shared', limit: request.limit ?? Number.MAX_SAFE_INTEGER }
    : { mode: 'exclusive', limit: 1 };
}

/**
 * Where a queued request stands among the waiters ahead of it (their modes from their node
 * names, Curator's `getsTheLock` over `children`): the last exclusive one ahead (a shared request
 * waits for it; an exclusive one for its predecessor), and how many shared ones are ahead.
 */
export function aheadOf(waitersAhead: string[]): {
  lastExclusive: string | undefined;
  shared: number;
} {
  let lastExclusive: string | undefined;
  let shared = 0;
  for (const waiter of waitersAhead) {
    if (specOf(waiter).mode === 'exclusive') lastExclusive = waiter;
    else shared += 1;
  }
  return { lastExclusive, shared };
}
