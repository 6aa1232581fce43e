import { DlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { expectedLinearizabilityReason } from '../src/expectations.js';
import { lockCompletionOf } from '../src/history.js';
import {
  checkLinearizability,
  checkName,
  type LinearizabilityOptions,
  type LockOp,
  type LockOpEvent,
} from '../src/linearizability.js';

const OPTIONS: LinearizabilityOptions = { expiryAfterMs: 1_000, unknownHorizonMs: 500 };

/** Operations on lock `x`, each [invoke, complete] on one time line. */
function history() {
  const ops: LockOp[] = [];
  const add = (proc: string, invoke: number, complete: number, result: LockOp['result']) => {
    ops.push({ proc, name: 'x', invoke, complete, result });
    return builder;
  };
  const builder = {
    ops,
    granted: (proc: string, a: number, b: number, token: number) =>
      add(proc, a, b, { f: 'acquire', outcome: 'granted', token: BigInt(token) }),
    held: (proc: string, a: number, b: number) =>
      add(proc, a, b, { f: 'acquire', outcome: 'held' }),
    lostAcquire: (proc: string, a: number) =>
      add(proc, a, a + OPTIONS.unknownHorizonMs, { f: 'acquire', outcome: 'unknown' }),
    release: (proc: string, a: number, b: number, token: number, released = true) =>
      add(proc, a, b, {
        f: 'release',
        outcome: released ? 'released' : 'not-held',
        token: BigInt(token),
      }),
    get: (proc: string, a: number, b: number, token?: number) =>
      add(
        proc,
        a,
        b,
        token === undefined
          ? { f: 'get', outcome: 'free' }
          : { f: 'get', outcome: 'held', token: BigInt(token) },
      ),
  };
  return builder;
}

const verdict = (ops: LockOp[], options: Partial<LinearizabilityOptions> = {}) =>
  checkName('x', ops, { ...OPTIONS, ...options }).verdict;

describe('linearizability checker', () => {
  it('accepts a sequential history and one whose overlapping operations can be ordered', () => {
    const sequential = history()
      .granted('a', 0, 1, 5)
      .get('b', 2, 3, 5)
      .held('b', 4, 5)
      .release('a', 6, 7, 5)
      .get('b', 8, 9)
      .granted('b', 10, 11, 6)
      .release('b', 12, 13, 6);
    expect(verdict(sequential.ops)).toBe('linearizable');
    // b's get overlaps a's grant and release: it may come before, between or after them.
    const overlapping = history()
      .granted('a', 0, 10, 5)
      .get('b', 1, 20, 5)
      .held('c', 2, 3)
      .release('a', 11, 12, 5)
      .get('c', 4, 30);
    expect(verdict(overlapping.ops)).toBe('linearizable');
  });

  it('catches a planted double grant, but not a grant after the first lease may have expired', () => {
    const double = history().granted('a', 0, 1, 5).granted('b', 10, 11, 6);
    expect(verdict(double.ops)).toBe('not-linearizable');
    const afterExpiry = history().granted('a', 0, 1, 5).granted('b', 1_100, 1_101, 6);
    expect(verdict(afterExpiry.ops)).toBe('linearizable');
  });

  it('catches a grant whose token is not above an earlier grant', () => {
    const lower = history().granted('a', 0, 1, 5).release('a', 2, 3, 5).granted('b', 4, 5, 5);
    expect(verdict(lower.ops)).toBe('not-linearizable');
  });

  it('catches a lower token granted while a higher one was granted and released (issue 28, as seen on PostgreSQL)', () => {
    // c6's grant overlaps c1's grant and release, and comes back with the lower token, still
    // held afterwards (a later get names it): no order of the three fits the specification.
    const ms = (seconds: number) => seconds * 1_000;
    /** c1 granted 9556 and released it; c6 granted `c6Token`, which c2's get names later. */
    const seen = (c6Token: number) =>
      history()
        .granted('c6', ms(9.404962), ms(9.435127), c6Token)
        .granted('c1', ms(9.40904), ms(9.422244), 9556)
        .release('c1', ms(9.424472), ms(9.431677), 9556)
        .get('c2', ms(9.5), ms(9.501), c6Token).ops;
    expect(verdict(seen(9554), { expiryAfterMs: 114_000 })).toBe('not-linearizable');
    // With the tokens the other way round, the same timing is fine: c6 came after the release.
    expect(verdict(seen(9557), { expiryAfterMs: 114_000 })).toBe('linearizable');
  });

  it('catches a planted spurious LOCK_HELD on a free lock', () => {
    const spurious = history().granted('a', 0, 1, 5).release('a', 2, 3, 5).held('b', 4, 5);
    expect(verdict(spurious.ops)).toBe('not-linearizable');
    // Concurrent with the release, LOCK_HELD is fine: it may have come first.
    const concurrent = history().granted('a', 0, 1, 5).release('a', 2, 6, 5).held('b', 4, 5);
    expect(verdict(concurrent.ops)).toBe('linearizable');
  });

  it('catches a planted phantom holder: a get naming a token nobody was granted', () => {
    const phantom = history()
      .granted('a', 0, 1, 42)
      .release('a', 2, 3, 42)
      .get('c', 4, 5, 43)
      .granted('b', 6, 7, 44);
    const result = checkName('x', phantom.ops, OPTIONS);
    expect(result.verdict).toBe('not-linearizable');
    expect(result.message).toMatch(/get → held by 43/);
    // The same read is fine when an acquire whose reply was lost could have been granted 43.
    const lost = history()
      .granted('a', 0, 1, 42)
      .release('a', 2, 3, 42)
      .lostAcquire('d', 3.5)
      .get('c', 4, 5, 43)
      .granted('b', 1_600, 1_601, 44);
    expect(verdict(lost.ops)).toBe('linearizable');
  });

  it('catches a holder read after its release returned, and a release by a token that does not hold', () => {
    const stale = history().granted('a', 0, 1, 5).release('a', 2, 3, 5).get('b', 4, 5, 5);
    expect(verdict(stale.ops)).toBe('not-linearizable');
    // The report shows what led up to it, for diagnosis from CI's output alone.
    expect(checkName('x', stale.ops, OPTIONS).message).toContain(
      'before them: acquire → granted 5 (a, 0.0–1.0); release(5) → released (a, 2.0–3.0)',
    );
    const wrongRelease = history().granted('a', 0, 1, 5).release('b', 2, 3, 4);
    expect(verdict(wrongRelease.ops)).toBe('not-linearizable');
    const notHeld = history().granted('a', 0, 1, 5).release('b', 2, 3, 4, false);
    expect(verdict(notHeld.ops)).toBe('linearizable');
  });

  it('lets an operation whose reply was lost take effect or not', () => {
    // The lost acquire took the lock: b's LOCK_HELD is explained.
    const took = history().lostAcquire('a', 0).held('b', 10, 11);
    expect(verdict(took.ops)).toBe('linearizable');
    // It did not: b gets the lock.
    const didNot = history().lostAcquire('a', 0).granted('b', 10, 11, 3);
    expect(verdict(didNot.ops)).toBe('linearizable');
    // Past its horizon it cannot take effect any more: a LOCK_HELD then has no explanation.
    const late = history().lostAcquire('a', 0).get('c', 600, 601).held('b', 700, 701);
    expect(verdict(late.ops)).toBe('not-linearizable');
  });

  it('lets a grant nobody saw end early (the client gives it back), but not a grant its caller got', () => {
    // Seen by a read, then freed long before the expiry bound: the client's background clean-up
    // of a late or lost grant (the PostgreSQL CI failure of 565dcb8 had this shape).
    const givenBack = history().lostAcquire('a', 0).get('b', 10, 11, 7).get('c', 20, 21);
    expect(verdict(givenBack.ops)).toBe('linearizable');
    // A grant that reached its caller only ends by its release or its expiry.
    const early = history().granted('a', 0, 1, 7).get('b', 10, 11, 7).get('c', 20, 21);
    expect(verdict(early.ops)).toBe('not-linearizable');
  });

  it('reports a search that exceeds its bound as inconclusive, not as a violation', () => {
    const wide = history();
    for (let i = 0; i < 12; i++) wide.get(`p${i}`, i, 1_000 + i);
    wide.granted('z', 5, 2_000, 9);
    const result = checkName('x', wide.ops, { ...OPTIONS, maxStates: 10 });
    expect(result.verdict).toBe('inconclusive');
  });

  it('reads recorded events: lost replies are unknown, other failures and lost reads dropped', () => {
    const events: LockOpEvent[] = [
      { kind: 'lock', t: 0, proc: 'a', op: 1, f: 'acquire', type: 'invoke', name: 'x' },
      { kind: 'lock', t: 1, proc: 'a', op: 1, f: 'acquire', type: 'ok', name: 'x', token: '7' },
      { kind: 'lock', t: 2, proc: 'b', op: 1, f: 'acquire', type: 'invoke', name: 'x' },
      {
        kind: 'lock',
        t: 3,
        proc: 'b',
        op: 1,
        f: 'acquire',
        type: 'fail',
        name: 'x',
        error: 'LOCK_HELD: held',
      },
      { kind: 'lock', t: 4, proc: 'b', op: 2, f: 'get', type: 'invoke', name: 'x' },
      {
        kind: 'lock',
        t: 5,
        proc: 'b',
        op: 2,
        f: 'get',
        type: 'info',
        name: 'x',
        error: 'UNAVAILABLE',
      },
      { kind: 'lock', t: 6, proc: 'c', op: 1, f: 'acquire', type: 'invoke', name: 'x' },
      {
        kind: 'lock',
        t: 7,
        proc: 'c',
        op: 1,
        f: 'acquire',
        type: 'fail',
        name: 'x',
        error: 'UNAVAILABLE: down',
      },
      { kind: 'lock', t: 8, proc: 'a', op: 2, f: 'release', type: 'invoke', name: 'x', token: '7' },
      { kind: 'lock', t: 9, proc: 'a', op: 2, f: 'release', type: 'info', name: 'x', token: '7' },
      { kind: 'lock', t: 10, proc: 'd', op: 1, f: 'get', type: 'invoke', name: 'x' },
      { kind: 'lock', t: 11, proc: 'd', op: 1, f: 'get', type: 'ok', name: 'x', held: false },
    ];
    const result = checkLinearizability(events, OPTIONS);
    expect(result).toMatchObject({ ops: 4, unknown: 1, violations: 0, inconclusive: 0 });
    expect(result.names).toMatchObject([{ name: 'x', verdict: 'linearizable', ops: 4 }]);
  });

  it('checks a long history of well-separated operations quickly', () => {
    const long = history();
    let t = 0;
    for (let i = 1; i <= 3_000; i++) {
      long
        .granted('a', t, t + 1, i)
        .get('b', t + 0.5, t + 1.5, i)
        .held('c', t + 1.2, t + 2);
      long.release('a', t + 2, t + 3, i).get('b', t + 3.5, t + 4);
      t += 5;
    }
    const started = performance.now();
    expect(verdict(long.ops)).toBe('linearizable');
    expect(performance.now() - started).toBeLessThan(5_000);
  });
});

describe('lock workload completions', () => {
  it('records a failed acquire or release as unknown (the client goes on with it), a failed read as failed', () => {
    const down = new DlmError('UNAVAILABLE', 'not connected');
    expect(lockCompletionOf('release', down).type).toBe('info');
    expect(lockCompletionOf('acquire', down).type).toBe('info');
    expect(lockCompletionOf('get', down).type).toBe('fail');
    expect(lockCompletionOf('release', new DlmError('NOT_HOLDER', 'gone')).type).toBe('fail');
  });
});

describe('which non-linearizable histories a backend explains', () => {
  const strict = {
    fencing: 'strict',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    durableAcrossRestart: true,
    fairQueue: false,
    expiryEvents: true,
  } as const;
  it('best-effort fencing (Redlock) under backend faults only; a strict durable backend under none', () => {
    const bestEffort = { ...strict, fencing: 'best-effort' } as const;
    for (const nemesis of ['server-kill', 'client-pause', 'none']) {
      expect(expectedLinearizabilityReason({ capabilities: bestEffort, nemesis })).toBeUndefined();
    }
    expect(
      expectedLinearizabilityReason({ capabilities: bestEffort, nemesis: 'backend-kill' }),
    ).toMatch(/backend faults/);
    for (const nemesis of ['server-kill', 'backend-kill', 'client-pause']) {
      expect(expectedLinearizabilityReason({ capabilities: strict, nemesis })).toBeUndefined();
    }
  });
});
