import { decideGrant, type GrantDecision, type RuleRequest } from '@dlm/core';

/**
 * How etcd's queue lets shared waiters of one name in side by side (issue 29, lever 6): where a
 * shared waiter sleeps, and when its next look may grant without reading first. Neither changes
 * what may be granted: core's rule decides on a read, and the grant's transaction still needs the
 * lock key free, the waiter's entry there, its holder key free and no lock-delay
 * (etcd-queue-txn.ts).
 *
 * Why a look may grant on a decision taken at an earlier read (the argument etcd-queue-txn.ts
 * gives for the look): take, among shared holders at one moment, the one whose entry is newest.
 * Every other one was placed before it, so at each of its reads it was a holder or an entry ahead
 * (nothing grants a shared holder outside the queue while anyone queues: a join or a try-lock
 * grants only with the queue empty), and the read that decided counted them all, below the limit.
 */

/** At most this many shared waiters of a name sleep on its holders (each end wakes them all). */
const ROOM_LOOKERS = 8;

/**
 * Where a shared waiter sleeps when the rule says "wait for the nearest entry" because the
 * holders and the shared entries ahead (all with its limit) fill the limit. Not on that entry:
 * when it leaves with a grant it makes no room (it becomes a holder), so sleeping on it made each
 * shared grant wait for the commit of the one ahead: one permit granted at a time, however many
 * were free. Room comes from holders ending. So the first `window` waiters (fewer than the limit,
 * and than `ROOM_LOOKERS`) sleep on the holders, woken by every end and every departure ahead
 * (core's wake rules for shared waiters on the holders), and are granted side by side; a waiter
 * further back sleeps on the entry whose departure brings it into that window (`ahead[i]`).
 * Undefined: as the rule says.
 */
export function roomWaitedOn(
  rule: RuleRequest,
  decision: GrantDecision,
  ahead: { blocking: boolean; shared: number; count: number },
): 'holders' | number | undefined {
  if (rule.mode !== 'shared' || decision.kind !== 'wait' || decision.on !== 'entry') return;
  if (decision.entry !== 'nearest' || ahead.blocking || ahead.shared !== ahead.count) return;
  const window = Math.min(rule.limit - 1, ROOM_LOOKERS);
  return ahead.shared <= window ? 'holders' : ahead.shared - window - 1;
}

/**
 * A shared waiter kept out only by an exclusive holder, or by the last exclusive entry ahead of
 * it, with room behind it: its next look may grant without a read once that one has gone.
 *
 * - `now`: an exclusive holder holds the name (so no shared one does) and no entry ahead must go
 *   first; the shared entries ahead (all placed after that holder) leave room. Granted as soon
 *   as the lock key is free: the next look's transaction, woken by its end.
 * - `behindEntry`: it sleeps on the last exclusive entry ahead; the shared entries between that
 *   one and it leave room. When that entry leaves with the lock (the watch says so), every entry
 *   before it has gone and no shared holder is left (an exclusive grant needs both), so the same
 *   holds as for `now`.
 */
export function decidedOnceFreed(
  rule: RuleRequest,
  decision: GrantDecision,
  exclusiveHolder: boolean,
  ahead: { blocking: boolean; shared: number; count: number; lastBlocking: number | undefined },
): { now: boolean; behindEntry: boolean } {
  if (rule.mode !== 'shared' || decision.kind !== 'wait') return { now: false, behindEntry: false };
  const now =
    decision.on === 'holder' &&
    exclusiveHolder &&
    !ahead.blocking &&
    decideGrant(rule, { count: 0 }, ahead).kind === 'grant';
  const behind = ahead.count - (ahead.lastBlocking ?? ahead.count) - 1;
  const behindEntry =
    decision.on === 'entry' && decision.entry === 'last-blocking' && behind < rule.limit;
  return { now, behindEntry };
}
