import { describe, expect, it } from 'vitest';
import { type CheckOptions, checkHistory } from '../src/checker.js';
import type { HistoryEvent } from '../src/history.js';
import { cleanHistory, historyBuilder } from './history-builder.js';

const OPTIONS: CheckOptions = { l1BoundMs: 500, l4BoundMs: 200, finalValues: { x: 2 } };

function check(events: HistoryEvent[], options: Partial<CheckOptions> = {}) {
  return checkHistory(
    [...events].sort((a, b) => a.t - b.t),
    { ...OPTIONS, ...options },
  );
}

/** The properties with violations, for exact assertions. */
function flagged(events: HistoryEvent[], options: Partial<CheckOptions> = {}) {
  const result = check(events, options);
  return Object.entries(result.counts)
    .filter(([, count]) => count > 0)
    .map(([property]) => property);
}

/** The clean history, plus the resource log accepting a write of token `token` over `over`. */
const withResourceWrite = (token: number, over: number) =>
  cleanHistory().resource(30, 'write', 'x', token, over, true, 2).end(5_000);

/** p1 (token 1) and then p2 (token 2, granted at 1 100) both read 0 from `x`. */
const bothReadZero = () =>
  historyBuilder()
    .acquire('p1', 'x', 0, 1, 1)
    .read('p1', 'x', 2, 3, 1, 0)
    .acquire('p2', 'x', 5, 1_100, 2)
    .read('p2', 'x', 1_101, 1_102, 2, 0);

/** p1's lease (token 1) ran out (deadline 990); p2 got token 2 at 1 100. */
const afterP1Lost = () =>
  historyBuilder()
    .acquire('p1', 'x', 0, 1, 1)
    .lost('p1', 'x', 990, 1)
    .acquire('p2', 'x', 5, 1_100, 2);

/** p1 holds token 1 from t=1. */
const p1Holding = () => historyBuilder().acquire('p1', 'x', 0, 1, 1);

/** After p1 lost token 1 to p2, p1 releases it anyway (answered `released`), then p2 its own. */
const staleRelease = (released: boolean) =>
  afterP1Lost()
    .release('p1', 'x', 1_200, 1_201, 1, released)
    .release('p2', 'x', 1_300, 1_301, 2, !released)
    .end(5_000);

/** m1, never granted token 1, releases it (answered `released`) while p1 holds it; then p1 does. */
const meddlerRelease = (released: boolean) =>
  p1Holding()
    .release('m1', 'x', 100, 101, 1, released)
    .release('p1', 'x', 300, 301, 1, !released)
    .end(5_000);

/** p1 (holding token 1) is killed at 100; p2, asking since 50, is granted at `grantedAt`. */
const p1KilledThenP2At = (grantedAt: number) =>
  p1Holding()
    .fault(100, 1, 'client-kill', 'start', 'p1', { name: 'x', token: '1' })
    .process(100, 'p1', 'kill')
    .fault(400, 1, 'client-kill', 'end', 'p1')
    .acquire('p2', 'x', 50, grantedAt, 2)
    .release('p2', 'x', grantedAt + 100, grantedAt + 101, 2)
    .end(5_000);

/** p1 (holding token 1) is paused from 500 to 3 000 and reports the loss at `lostAt`. */
const p1PausedLostAt = (lostAt: number) =>
  p1Holding()
    .process(500, 'p1', 'pause')
    .process(3_000, 'p1', 'resume')
    .lost('p1', 'x', lostAt, 1)
    .end(6_000);

describe('checker on hand-made histories', () => {
  it('finds nothing wrong in a clean history, and counts what happened', () => {
    const result = check(cleanHistory().end(5_000).events);
    expect(result.violations).toEqual([]);
    expect(result.stats).toMatchObject({ grants: 2, writes: 2, staleRefused: 0, unknown: 0 });
  });

  it('S1: the resource accepting an older token after a newer one (its own log)', () => {
    expect(flagged(withResourceWrite(1, 2).events, { finalValues: { x: 2 } })).toContain('S1');
  });

  it('S1: a stale access acknowledged, seen from the clients alone', () => {
    // No resource log: p1's write with token 1 is sent after p2's read with token 2 came back.
    const events = bothReadZero().write('p1', 'x', 1_200, 1_201, 1, 1).end(5_000).events;
    expect(flagged(events, { finalValues: {} })).toContain('S1');
    // The same accesses in the other order are fine.
    const fine = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .read('p1', 'x', 2, 3, 1, 0)
      .write('p1', 'x', 4, 5, 1, 1)
      .acquire('p2', 'x', 5, 1_100, 2)
      .read('p2', 'x', 1_101, 1_102, 2, 1)
      .end(5_000).events;
    expect(flagged(fine, { finalValues: {} })).not.toContain('S1');
  });

  it('S2: a token granted twice', () => {
    const h = cleanHistory().acquire('p3', 'x', 30, 31, 2).release('p3', 'x', 32, 33, 2).end(5_000);
    const result = check(h.events);
    expect(result.counts.S2).toBeGreaterThanOrEqual(1);
    expect(result.violations.find((v) => v.property === 'S2')?.message).toMatch(/granted twice/);
  });

  it('S2: a lower token granted after a higher grant completed', () => {
    const h = cleanHistory().acquire('p3', 'x', 30, 31, 1).release('p3', 'x', 32, 33, 1).end(5_000);
    expect(flagged(h.events)).toContain('S2');
    // Concurrent acquires may complete in either order: no violation.
    const concurrent = historyBuilder()
      .acquire('p1', 'x', 0, 10, 2)
      .release('p1', 'x', 11, 12, 2)
      .acquire('p2', 'x', 1, 20, 1)
      .release('p2', 'x', 21, 22, 1);
    expect(check(concurrent.end(5_000).events, { finalValues: {} }).counts.S2).toBe(0);
  });

  it('S3: two acknowledged writes that read the same value', () => {
    // p1 read 0 with token 1, stalled; p2 read 0 with token 2 and wrote 1; p1's write of 1 lands.
    const events = bothReadZero()
      .write('p2', 'x', 1_103, 1_104, 2, 1)
      .write('p1', 'x', 1_200, 1_201, 1, 1)
      .end(5_000).events;
    const result = check(events, { finalValues: { x: 1 } });
    expect(result.counts.S3).toBe(1);
  });

  it('S3: a final counter below the acknowledged writes', () => {
    expect(flagged(cleanHistory().end(5_000).events, { finalValues: { x: 1 } })).toEqual(['S3']);
  });

  it('S3: an accepted write that does not add one (the resource log)', () => {
    expect(flagged(withResourceWrite(2, 1).events, { finalValues: { x: 1 } })).toContain('S3');
  });

  it("S4: a stale holder's release succeeding after a newer grant", () => {
    // p1's lease ran out (deadline 990); p2 got token 2 at 1 100; p1 then "releases" it.
    expect(flagged(staleRelease(true).events, { finalValues: {} })).toEqual(['S4']);
    // The same release answered "not released" is what should happen.
    expect(flagged(staleRelease(false).events, { finalValues: {} })).toEqual([]);
  });

  it("S4: a stale holder's extend succeeding after a newer grant", () => {
    const h = afterP1Lost()
      .extend('p1', 'x', 1_200, 1_201, 1, 2_190)
      .release('p2', 'x', 1_300, 1_301, 2)
      .release('p1', 'x', 1_400, 1_401, 1, false)
      .end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toContain('S4');
  });

  it('S4: a meddler that was never granted the token releasing or extending the lease', () => {
    // m1 read p1's token (lock.get) and sent a release and an extend with it, without the key.
    const meddled = meddlerRelease(true);
    expect(flagged(meddled.events, { finalValues: {} })).toEqual(['S4']);
    const extended = p1Holding()
      .extend('m1', 'x', 100, 101, 1, 2_000)
      .release('p1', 'x', 300, 301, 1)
      .end(5_000);
    expect(flagged(extended.events, { finalValues: {} })).toContain('S4');
    // Refused (NOT_HOLDER, as recorded by a meddler: not released), nothing to flag.
    const refused = meddlerRelease(false);
    expect(flagged(refused.events, { finalValues: {} })).toEqual([]);
    expect(check(refused.events, { finalValues: {} }).stats.meddling).toEqual({
      answered: 1,
      refused: 1,
    });
    expect(check(meddled.events, { finalValues: {} }).stats.meddling).toEqual({
      answered: 1,
      refused: 0,
    });
  });

  it('S5: a grant that arrives with no time left', () => {
    const h = historyBuilder()
      .acquire('p1', 'x', 0, 1_000, 1, { deadline: 990 })
      .lost('p1', 'x', 1_000, 1)
      .end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toEqual(['S5']);
  });

  it('S5: a grant that arrives after a newer grant of the lock completed', () => {
    const h = historyBuilder()
      .acquire('p1', 'x', 0, 2_500, 1, { deadline: 990 + 1_500 })
      .acquire('p2', 'x', 5, 1_100, 2)
      .release('p2', 'x', 1_200, 1_201, 2)
      .release('p1', 'x', 2_501, 2_502, 1, false)
      .end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toContain('S5');
  });

  it('S5 is not judged for a client that was paused while the reply was on its way', () => {
    const h = historyBuilder()
      .process(100, 'p1', 'pause')
      .process(2_400, 'p1', 'resume')
      .acquire('p1', 'x', 0, 2_500, 1, { deadline: 990 })
      .lost('p1', 'x', 2_500, 1)
      .end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toEqual([]);
  });

  it('S6: a newer grant while the older holder still holds it by its deadline', () => {
    // p1's deadline is 990 and it has not released; p2 is granted at 500.
    const h = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .acquire('p2', 'x', 5, 500, 2)
      .release('p2', 'x', 600, 601, 2)
      .release('p1', 'x', 700, 701, 1, false)
      .end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toEqual(['S6']);
  });

  it('L1: a dead holder whose lock is not free again within its lease + the bound', () => {
    const result = check(p1KilledThenP2At(3_000).events, { finalValues: {} });
    expect(result.counts.L1).toBe(1);
    expect(result.takeoverMs).toEqual([2_000 - 1]); // lease end = 1 + 1000, next grant at 3000
    expect(check(p1KilledThenP2At(1_200).events, { finalValues: {} }).counts.L1).toBe(0);
  });

  it('L1: nobody gets the lock again although somebody keeps asking', () => {
    const h = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .fault(100, 1, 'client-pause', 'start', 'p1', { name: 'x', token: '1' })
      .process(100, 'p1', 'pause')
      .end(5_000);
    // p2's wait ends without the lock at 4 000.
    h.events.push(
      { kind: 'op', t: 50, proc: 'p2', op: 99, f: 'acquire', type: 'invoke', name: 'x' },
      {
        kind: 'op',
        t: 4_000,
        proc: 'p2',
        op: 99,
        f: 'acquire',
        type: 'fail',
        name: 'x',
        error: 'LOCK_HELD',
      },
    );
    expect(flagged(h.events, { finalValues: {} })).toContain('L1');
  });

  it('L4: a lease whose deadline passed and that the client never reported lost', () => {
    const h = historyBuilder().acquire('p1', 'x', 0, 1, 1).end(5_000);
    expect(flagged(h.events, { finalValues: {} })).toEqual(['L4']);
    const reported = historyBuilder().acquire('p1', 'x', 0, 1, 1).lost('p1', 'x', 1_000, 1);
    expect(flagged(reported.end(5_000).events, { finalValues: {} })).toEqual([]);
    // Released a little after the deadline (a busy event loop): over in time, no report due.
    const releasedLate = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .release('p1', 'x', 1_100, 1_101, 1, false);
    expect(flagged(releasedLate.end(5_000).events, { finalValues: {} })).toEqual([]);
    // Released long after, and never reported lost in between.
    const releasedTooLate = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .release('p1', 'x', 2_000, 2_001, 1, false);
    expect(flagged(releasedTooLate.end(5_000).events, { finalValues: {} })).toEqual(['L4']);
  });

  it('L4: a paused client must report the loss on resuming, not later', () => {
    expect(flagged(p1PausedLostAt(3_050).events, { finalValues: {} })).toEqual([]);
    expect(flagged(p1PausedLostAt(3_500).events, { finalValues: {} })).toEqual(['L4']);
  });

  it('a token granted twice to one process (a backend that forgot its counter) is two leases', () => {
    // Both leases ran out and both losses were reported: S2 is violated, L4 is not.
    const h = historyBuilder()
      .acquire('p1', 'x', 0, 1, 1)
      .lost('p1', 'x', 991, 1)
      .acquire('p1', 'x', 2_000, 2_001, 1)
      .lost('p1', 'x', 2_991, 1)
      .end(6_000);
    expect(flagged(h.events, { finalValues: {} })).toEqual(['S2']);
  });

  it('recovery: from the end of each fault to the next acknowledged write', () => {
    const h = cleanHistory().fault(4, 1, 'server-kill', 'start', 'server');
    h.fault(8, 1, 'server-kill', 'end', 'server').end(5_000);
    const result = check(h.events);
    expect(result.recoveryMs).toEqual([3]); // next write acknowledged at 11
    expect(result.stats.faults).toBe(1);
  });

  it('first grant: from the start of each fault to the grant of the first acquire sent after it', () => {
    const h = cleanHistory().fault(4, 1, 'master-kill', 'start', 'redis1');
    h.fault(6, 1, 'master-kill', 'end', 'redis1');
    h.fault(30, 2, 'master-kill', 'start', 'redis2').fault(31, 2, 'master-kill', 'end', 'redis2');
    // p1's grant (sent at 0) completed before; p2's was sent at 5 and granted at 14.
    expect(check(h.end(5_000).events).firstGrantMs).toEqual([10, null]);
  });

  it('double grants: a grant while an earlier one of the lock can still hold, unreleased', () => {
    expect(check(cleanHistory().end(5_000).events).doubleGrants).toBe(0);
    // p1 holds from 100 (TTL 1000) and never releases; p2 is granted at 600: the backend lost it.
    const lost = historyBuilder()
      .acquire('p1', 'y', 100, 101, 1)
      .acquire('p2', 'y', 500, 600, 2)
      .end(5_000);
    expect(check(lost.events).doubleGrants).toBe(1);
    // The same, but p1's release was sent (and answered) before: not a double grant.
    const released = historyBuilder()
      .acquire('p1', 'y', 100, 101, 1)
      .release('p1', 'y', 300, 301, 1)
      .acquire('p2', 'y', 500, 600, 2)
      .end(5_000);
    expect(check(released.events).doubleGrants).toBe(0);
  });

  describe('S9: lock-delay', () => {
    /** p1 asks for token 1 at 0 (TTL 1 000, delay 2 000) and never releases; p2 gets token 2 at `at`. */
    const delayedThenP2At = (at: number, release?: number) => {
      const history = historyBuilder()
        .acquire('p1', 'x', 0, 1, 1, { lockDelayMs: 2_000 })
        .lost('p1', 'x', 990, 1);
      if (release !== undefined) history.release('p1', 'x', release, release + 1, 1, false);
      return history.acquire('p2', 'x', 500, at, 2).end(5_000).events;
    };

    it('flags a grant within the delay of an unreleased lease (a backend that ignores it, planted)', () => {
      const result = check(delayedThenP2At(1_100));
      expect(result.counts.S9).toBe(1);
      expect(result.violations.find((v) => v.property === 'S9')?.message).toContain(
        'before the lock-delay (2000 ms)',
      );
    });

    it('passes a grant once the delay after the earliest end has passed', () => {
      expect(check(delayedThenP2At(3_000)).counts.S9).toBe(0);
    });

    it('passes a grant after a release that was sent before it (a clean end has no delay)', () => {
      expect(check(delayedThenP2At(1_100, 200)).counts.S9).toBe(0);
    });

    it('ignores leases asked without a delay', () => {
      const events = afterP1Lost().end(5_000).events;
      expect(check(events).counts.S9).toBe(0);
    });
  });
  describe('S10: hold cap', () => {
    /** p1 gets token 1 at 10 (asked at 0, TTL 1 000, cap 2 000) and extends once at 900. */
    const cappedThenExtendedUntil = (deadline: number, maxHoldMs: number | null = 2_000) =>
      historyBuilder()
        .acquire('p1', 'x', 0, 10, 1, maxHoldMs === null ? {} : { maxHoldMs })
        .extend('p1', 'x', 900, 910, 1, deadline)
        .release('p1', 'x', 1_500, 1_510, 1)
        .end(5_000).events;

    it('flags a renewal past the cap (a backend that ignores it, planted)', () => {
      const result = check(cappedThenExtendedUntil(2_890));
      expect(result.counts.S10).toBe(1);
      expect(result.violations.find((v) => v.property === 'S10')?.message).toContain(
        'past its cap on holding (2000 ms after its grant)',
      );
    });

    it('passes a renewal granted up to the cap only', () => {
      expect(check(cappedThenExtendedUntil(2_000)).counts.S10).toBe(0);
    });

    it('ignores leases asked without a cap', () => {
      expect(check(cappedThenExtendedUntil(2_890, null)).counts.S10).toBe(0);
    });
  });
});
