import type { LockConflict } from './backend.js';
import type { LockMode } from './validation.js';

/**
 * The grant rule, written once: may this request be granted now, given the name's holders and
 * the queue entries ahead of it, per mode and limit (Curator's `getsTheLock(children, me,
 * maxLeases)`, with modes). Embedded, etcd and ZooKeeper call `decideGrant`; the Redis Lua and
 * the PostgreSQL SQL evaluate the same rule inside their store and are run against
 * `GRANT_RULE_CASES` in their adapter tests. In order:
 *
 * 1. the requester's own holder (same owner and key hash): in the other mode a conflict (`mode`),
 *    shared with another limit a conflict (`limit`, its own), else that holder, refreshed;
 * 2. shared, while shared holders agreed on another limit: a conflict (`limit`, theirs);
 * 3. exclusive: behind any entry, wait for the nearest one; held, wait for the holders (the
 *    latest end); else granted;
 * 4. shared: behind an entry that must go first (exclusive, or shared with another limit), wait
 *    for the last such one; an exclusive holder, wait for it; when the holders and the shared
 *    entries ahead fill the limit, wait for the nearest entry ahead (it takes the next room
 *    first), or with none ahead for the holders (the soonest end); else granted;
 * 5. lock-delay (Chubby's, Consul's): a name without holders whose last lease ended by expiry or
 *    revocation within that lease's `lockDelayMs` grants nobody: where 3 or 4 would grant, wait
 *    for the delay to pass (`lockDelayRemainingMs`). It only holds back grants: the entries
 *    ahead are still waited for first, and a holder's own refresh is not a grant.
 *
 * So one FIFO serves both modes: consecutive shared requests at its head are granted together up
 * to the limit, and an exclusive request holds back every request behind it (no writer
 * starvation). A try-lock is the same rule with every queued entry ahead of it: it is granted
 * exactly when a request queued now would be at once.
 */

/** The request, as the rule sees it: its mode and limit (1 for exclusive). */
export interface RuleRequest {
  mode: LockMode;
  limit: number;
}

/** The name's live holders, as the rule needs them (each backend reads them its own way). */
export interface RuleHolders {
  /** How many hold it now (0: free). */
  count: number;
  /** Their mode, when `count > 0`: one exclusive holder, or shared holders. */
  mode?: LockMode | undefined;
  /** With shared holders: the limit they agreed on. */
  limit?: number | undefined;
  /** The requester's own holder (same owner and key hash), if it holds: its mode and limit. */
  own?: RuleRequest | undefined;
  /**
   * With no holder: how long the name's lock-delay has left (the last lease ended by expiry or
   * revocation less than its `lockDelayMs` ago). Absent or ≤ 0: none. Ignored while held (a
   * store may keep the delay of a live lease ready, to start at its end).
   */
  lockDelayRemainingMs?: number | undefined;
}

/** The queue entries ahead of the request (for a try-lock: every entry queued). */
export interface RuleAhead {
  /** How many entries are ahead. */
  count: number;
  /** Whether one of them must go before a shared request: exclusive, or shared with another limit. */
  blocking: boolean;
  /** The shared entries ahead with the request's limit (they take room before it). */
  shared: number;
}

/** What the rule decides. `wait` says what to sleep on; the backend knows its ids and times. */
export type GrantDecision =
  | { kind: 'grant' }
  /** The requester holds it in this mode and limit: refresh that holder (same token). */
  | { kind: 'refresh' }
  | { kind: 'conflict'; conflict: LockConflict }
  /** Wait for an entry ahead to leave: the nearest one, or the last one that must go first. */
  | { kind: 'wait'; on: 'entry'; entry: 'nearest' | 'last-blocking' }
  /** Wait for the holders: the latest end (exclusive, or behind one) or the soonest (shared). */
  | { kind: 'wait'; on: 'holder'; end: 'latest' | 'soonest' }
  /** Free, but in its lock-delay: wait until it passes (`RuleHolders.lockDelayRemainingMs`). */
  | { kind: 'wait'; on: 'delay' };

const DELAYED: GrantDecision = { kind: 'wait', on: 'delay' };

/** Whether the name is free but in its lock-delay (rule 5). */
function delayed(holders: RuleHolders): boolean {
  return holders.count === 0 && (holders.lockDelayRemainingMs ?? 0) > 0;
}

export const NOTHING_AHEAD: RuleAhead = { count: 0, blocking: false, shared: 0 };

/** The grant rule (see the top of this file). Pure: the same inputs, the same decision. */
export function decideGrant(
  request: RuleRequest,
  holders: RuleHolders,
  ahead: RuleAhead = NOTHING_AHEAD,
): GrantDecision {
  const { own } = holders;
  const shared = request.mode === 'shared';
  if (own) {
    if (own.mode !== request.mode) return { kind: 'conflict', conflict: { field: 'mode' } };
    if (shared && own.limit !== request.limit) {
      return { kind: 'conflict', conflict: { field: 'limit', limit: own.limit } };
    }
    return { kind: 'refresh' };
  }
  const held = holders.count > 0;
  if (!shared) {
    if (ahead.count > 0) return { kind: 'wait', on: 'entry', entry: 'nearest' };
    if (held) return { kind: 'wait', on: 'holder', end: 'latest' };
    return delayed(holders) ? DELAYED : { kind: 'grant' };
  }
  if (held && holders.mode === 'shared' && holders.limit !== request.limit) {
    return { kind: 'conflict', conflict: { field: 'limit', limit: holders.limit ?? 0 } };
  }
  if (ahead.blocking) return { kind: 'wait', on: 'entry', entry: 'last-blocking' };
  if (held && holders.mode !== 'shared') return { kind: 'wait', on: 'holder', end: 'latest' };
  if (holders.count + ahead.shared < request.limit) {
    return delayed(holders) ? DELAYED : { kind: 'grant' };
  }
  // The shared entries ahead take the next room first: only the first of them watches the
  // holders, the others their entry ahead (one wake per end, not one per waiter).
  if (ahead.shared > 0) return { kind: 'wait', on: 'entry', entry: 'nearest' };
  return { kind: 'wait', on: 'holder', end: 'soonest' };
}

/** One holder, as a backend that reads them all (or a test) lists them. */
export interface ListedHolder {
  mode: LockMode;
  /** 1 for exclusive. */
  limit: number;
  /** Whether it is the requester's own (same owner and key hash). */
  own?: boolean | undefined;
}

/** `RuleHolders` of a list of live holders (and the name's lock-delay left, if any). */
export function holdersOf(
  holders: readonly ListedHolder[],
  lockDelayRemainingMs?: number,
): RuleHolders {
  const first = holders[0];
  const own = holders.find((holder) => holder.own);
  return {
    count: holders.length,
    mode: first?.mode,
    limit: first?.limit,
    own: own && { mode: own.mode, limit: own.limit },
    lockDelayRemainingMs,
  };
}

/** `RuleAhead` of the entries ahead of a request (oldest first), and which ones it waits for. */
export function aheadOf(
  request: RuleRequest,
  entries: readonly RuleRequest[],
): RuleAhead & { lastBlocking: number | undefined } {
  let lastBlocking: number | undefined;
  let shared = 0;
  entries.forEach((entry, index) => {
    if (entry.mode === 'shared' && entry.limit === request.limit) shared += 1;
    else lastBlocking = index;
  });
  return { count: entries.length, blocking: lastBlocking !== undefined, shared, lastBlocking };
}

/**
 * One case of the rule, for every translation of it to check: the state (holders and entries
 * ahead, each listed), the request, and the decision. `entry` and `holder` in a `wait` name the
 * index waited on (`entries[i]`; for the holders, the one whose `remainingMs` is the end waited
 * for), so that a store's answer (an id, a time) can be compared.
 */
export interface GrantRuleCase {
  name: string;
  request: RuleRequest;
  /** Live holders, by token; `remainingMs` is each one's lease left. */
  holders: readonly (ListedHolder & { remainingMs: number })[];
  /** Queue entries ahead of the request, oldest first. */
  ahead: readonly RuleRequest[];
  /**
   * The name's lock-delay left: the last lease (exclusive, by `lockDelayOwner`, with that
   * `lockDelayMs`) ended by expiry this long before the window closes. Absent: none.
   */
  lockDelayRemainingMs?: number;
  expect:
    | { kind: 'grant' }
    | { kind: 'refresh' }
    | { kind: 'conflict'; conflict: LockConflict }
    | { kind: 'wait-entry'; entry: number }
    | { kind: 'wait-holder'; holder: number }
    | { kind: 'wait-delay' };
}

const X: RuleRequest = { mode: 'exclusive', limit: 1 };
const S = (limit: number): RuleRequest => ({ mode: 'shared', limit });
const holder = (spec: RuleRequest, remainingMs: number, own = false) =>
  Object.assign({}, spec, {
    remainingMs,
    own,
  });

/** The expected answer, short: a kind, the entry or holder waited on, or the conflict. */
type Expected =
  | 'grant'
  | 'refresh'
  | { entry: number }
  | { holder: number }
  | { conflict: LockConflict }
  | 'wait-delay';

const MODE: Expected = { conflict: { field: 'mode' } };
const LIMIT_3: Expected = { conflict: { field: 'limit', limit: 3 } };

/** One row of the table. */
function rule(
  name: string,
  request: RuleRequest,
  holders: GrantRuleCase['holders'],
  ahead: readonly RuleRequest[],
  expected: Expected,
  lockDelayRemainingMs?: number,
): GrantRuleCase {
  const expect: GrantRuleCase['expect'] =
    typeof expected === 'string'
      ? { kind: expected }
      : 'entry' in expected
        ? { kind: 'wait-entry', entry: expected.entry }
        : 'holder' in expected
          ? { kind: 'wait-holder', holder: expected.holder }
          : { kind: 'conflict', conflict: expected.conflict };
  const testCase: GrantRuleCase = { name, request, holders, ahead, expect };
  return lockDelayRemainingMs === undefined
    ? testCase
    : Object.assign({}, testCase, { lockDelayRemainingMs });
}

/**
 * The rule's case table: every branch of `decideGrant`, each as a state a store can hold. A
 * translation of the rule (Lua, SQL) passes when it answers every case as listed here. Each row:
 * the case, the request, the holders (`holder(spec, ms left, own?)`), the entries ahead, and the
 * answer (`{ entry: i }` and `{ holder: i }` name the one waited on).
 */
export const GRANT_RULE_CASES: readonly GrantRuleCase[] = [
  rule('exclusive, free, nobody ahead: granted', X, [], [], 'grant'),
  rule('shared, free, nobody ahead: granted', S(3), [], [], 'grant'),
  rule('exclusive behind an exclusive holder: waits for it', X, [holder(X, 5_000)], [], {
    holder: 0,
  }),
  rule(
    'exclusive behind shared holders: waits for the latest end',
    X,
    [holder(S(3), 2_000), holder(S(3), 9_000), holder(S(3), 5_000)],
    [],
    { holder: 1 },
  ),
  rule('exclusive, free, behind an entry: waits for the nearest entry', X, [], [S(3), X], {
    entry: 1,
  }),
  rule(
    'exclusive, held, behind an entry: waits for the entry, not the holder',
    X,
    [holder(X, 5_000)],
    [X],
    { entry: 0 },
  ),
  rule('the exclusive holder asking again: refreshed', X, [holder(X, 5_000, true)], [X], 'refresh'),
  rule(
    'a shared holder asking again with its limit: refreshed, even at the limit',
    S(2),
    [holder(S(2), 5_000, true), holder(S(2), 6_000)],
    [X],
    'refresh',
  ),
  rule(
    'the exclusive holder asking shared: conflict (mode)',
    S(3),
    [holder(X, 5_000, true)],
    [],
    MODE,
  ),
  rule(
    'a shared holder asking exclusive: conflict (mode)',
    X,
    [holder(S(3), 5_000), holder(S(3), 5_000, true)],
    [],
    MODE,
  ),
  rule(
    'a shared holder asking with another limit: conflict (limit, its own)',
    S(5),
    [holder(S(3), 5_000, true)],
    [],
    LIMIT_3,
  ),
  rule(
    'shared beside holders with another limit: conflict (limit, theirs)',
    S(5),
    [holder(S(3), 5_000)],
    [],
    LIMIT_3,
  ),
  rule(
    'shared beside holders with another limit, behind an exclusive entry: conflict at once',
    S(5),
    [holder(S(3), 5_000)],
    [X],
    LIMIT_3,
  ),
  rule(
    'shared beside shared holders with room: granted',
    S(3),
    [holder(S(3), 5_000), holder(S(3), 6_000)],
    [],
    'grant',
  ),
  rule(
    'shared at the limit: waits for the soonest end',
    S(2),
    [holder(S(2), 7_000), holder(S(2), 3_000)],
    [],
    { holder: 1 },
  ),
  rule('shared behind an exclusive holder: waits for it', S(3), [holder(X, 4_000)], [], {
    holder: 0,
  }),
  rule(
    'shared behind an exclusive holder and shared entries: waits for the holder',
    S(3),
    [holder(X, 4_000)],
    [S(3)],
    { holder: 0 },
  ),
  rule(
    'shared behind an exclusive entry: waits for it, though there is room',
    S(3),
    [holder(S(3), 5_000)],
    [S(3), X, S(3)],
    { entry: 1 },
  ),
  rule(
    'shared behind a shared entry with another limit: waits for that entry',
    S(3),
    [],
    [S(2), S(3)],
    { entry: 0 },
  ),
  rule(
    'shared behind shared entries that leave it room: granted beside them',
    S(4),
    [holder(S(4), 5_000)],
    [S(4), S(4)],
    'grant',
  ),
  rule(
    'shared whose room the shared entries ahead take: waits for the nearest entry',
    S(3),
    [holder(S(3), 5_000)],
    [S(3), S(3)],
    { entry: 1 },
  ),
  rule(
    'shared, free, behind as many shared entries as its limit: waits for the nearest entry',
    S(2),
    [],
    [S(2), S(2)],
    { entry: 1 },
  ),
  rule(
    'shared at the limit behind shared entries: waits for the nearest entry, not the holders',
    S(2),
    [holder(S(2), 6_000), holder(S(2), 2_000)],
    [S(2), S(2)],
    { entry: 1 },
  ),
  rule('exclusive, free, in its lock-delay: waits for the delay', X, [], [], 'wait-delay', 4_000),
  rule('shared, free, in its lock-delay: waits for the delay', S(3), [], [], 'wait-delay', 4_000),
  rule(
    'exclusive in a lock-delay, behind an entry: waits for the entry first',
    X,
    [],
    [X],
    { entry: 0 },
    4_000,
  ),
  rule(
    'shared in a lock-delay, behind an exclusive entry: waits for the entry first',
    S(3),
    [],
    [X],
    { entry: 0 },
    4_000,
  ),
  rule(
    'exclusive, held, with the delay its holder would leave: waits for the holder',
    X,
    [holder(X, 5_000)],
    [],
    { holder: 0 },
    9_000,
  ),
];

/** What `decideGrant` answers a case, in the table's terms (the entry or holder waited on, by index). */
export function ruleAnswer(testCase: GrantRuleCase): GrantRuleCase['expect'] {
  const { request, holders, ahead } = testCase;
  const facts = aheadOf(request, ahead);
  const decision = decideGrant(request, holdersOf(holders, testCase.lockDelayRemainingMs), facts);
  if (decision.kind !== 'wait') return decision;
  if (decision.on === 'delay') return { kind: 'wait-delay' };
  if (decision.on === 'entry') {
    const entry = decision.entry === 'nearest' ? ahead.length - 1 : facts.lastBlocking!;
    return { kind: 'wait-entry', entry };
  }
  let at = 0;
  holders.forEach((one, index) => {
    const end = one.remainingMs;
    const best = holders[at]!.remainingMs;
    if (decision.end === 'latest' ? end > best : end < best) at = index;
  });
  return { kind: 'wait-holder', holder: at };
}
