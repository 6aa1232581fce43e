import { aheadOf, type RuleAhead, type RuleHolders } from '@dlm/core';
import { type Current, isOwnLease } from './zk-locks.js';
import { type EntrySpec, specOf } from './zk-paths.js';

/**
 * ZooKeeper's holders and waiters as core's grant rule (`decideGrant`) reads them: the holders
 * from their nodes' data (live, with their leases left on ZooKeeper's clock), or from their node
 * names alone (mode and limit, owners unknown); the waiters ahead from their node names.
 */

/** A holder whose lease still runs, with how much of it is left. */
export interface LiveHolder {
  holder: Current;
  remainingMs: number;
}

/** The live holders as the rule reads them, and the requester's own among them. */
export function liveHolders(
  live: readonly LiveHolder[],
  request: { owner: string; keyHash?: string | undefined },
): { holders: RuleHolders; own: Current | undefined } {
  const own = live.find(({ holder }) => isOwnLease(holder, request.owner, request.keyHash))?.holder;
  const first = live[0]?.holder;
  return {
    holders: {
      count: live.length,
      mode: first?.mode,
      limit: first?.limit,
      own: own && { mode: own.mode, limit: own.limit },
    },
    own,
  };
}

/** The holders as their node names tell (a name records its mode and limit, not its owner). */
export function namedHolders(holderNodes: readonly string[]): RuleHolders {
  const first = holderNodes[0];
  return first === undefined ? { count: 0 } : { count: holderNodes.length, ...specOf(first) };
}

/** The end a wait on the holders sleeps until: the latest or the soonest of their leases. */
export function endOf(live: readonly LiveHolder[], end: 'latest' | 'soonest'): number {
  const ends = live.map(({ remainingMs }) => remainingMs);
  if (ends.length === 0) return 0;
  return end === 'latest' ? Math.max(...ends) : Math.min(...ends);
}

/** The waiters ahead (node names, in queue order) as the rule reads them. */
export function aheadOfWaiters(spec: EntrySpec, waitersAhead: readonly string[]) {
  return aheadOf(spec, waitersAhead.map(specOf)) satisfies RuleAhead;
}

/** The request's mode and limit as the backend stores it (absent mode: exclusive). */
export function specOfRequest(request: {
  mode?: string | undefined;
  limit?: number | undefined;
  maxHoldMs?: number | undefined;
}): EntrySpec {
  if (request.mode === 'shared') {
    return { mode: 'shared', limit: request.limit ?? Number.MAX_SAFE_INTEGER };
  }
  const { maxHoldMs } = request;
  return maxHoldMs === undefined
    ? { mode: 'exclusive', limit: 1 }
    : { mode: 'exclusive', limit: 1, maxHoldMs };
}
