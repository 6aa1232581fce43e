import {
  type AcquireRequest,
  createManualClock,
  DlmError,
  type LockBackend,
  type LockEvent,
  type ManualClock,
} from '@dlm/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { embeddedBackend } from '../src/index.js';

// Shared modes (issue 18) on the backend directly, in memory, on a manual clock.
describe('embedded backend shared modes (in memory, manual clock)', () => {
  let clock: ManualClock;
  let backend: LockBackend;

  beforeEach(async () => {
    clock = createManualClock();
    backend = await embeddedBackend({ clock, logger: () => {} });
  });
  afterEach(() => backend.close());

  const shared = (name: string, owner: string, ttlMs: number, limit: number, keyHash?: string) =>
    backend.tryAcquire({ name, owner, ttlMs, mode: 'shared', limit, keyHash });
  const grantShared = async (
    name: string,
    owner: string,
    ttlMs: number,
    limit: number,
    keyHash?: string,
  ) => {
    const result = await shared(name, owner, ttlMs, limit, keyHash);
    if (!result.granted) throw new Error(`${name} was not granted to ${owner}`);
    return result.grant;
  };
  const grantExclusive = async (name: string, owner: string, ttlMs: number, keyHash?: string) => {
    const result = await backend.tryAcquire({ name, owner, ttlMs, keyHash });
    if (!result.granted) throw new Error(`${name} was not granted to ${owner}`);
    return result.grant;
  };

  it('declares sharedModes', () => {
    expect(backend.capabilities.sharedModes).toBe(true);
  });

  it('grants shared holders up to the limit, each with its own rising token', async () => {
    const a = await grantShared('s', 'alice', 1000, 3);
    clock.advance(100);
    const b = await grantShared('s', 'bob', 500, 3);
    const c = await grantShared('s', 'carol', 2000, 3);
    expect(a.token).toBe(1n);
    expect(b.token).toBe(2n);
    expect(c.token).toBe(3n);
    // At the limit: a fourth waits for the soonest end (bob's, 500 ms from now).
    expect(await shared('s', 'dave', 1000, 3)).toEqual({ granted: false, ttlRemainingMs: 500 });
    // An exclusive request waits for the latest end (carol's).
    expect(await backend.tryAcquire({ name: 's', owner: 'erin', ttlMs: 1000 })).toEqual({
      granted: false,
      ttlRemainingMs: 2000,
    });
    clock.advance(500);
    // Bob's lease ended, so there is room again.
    const d = await grantShared('s', 'dave', 1000, 3);
    expect(d.token).toBe(4n);
  });

  it('refuses a shared request while an exclusive holder holds, with its remaining lease', async () => {
    await grantExclusive('x', 'alice', 1000);
    clock.advance(250);
    expect(await shared('x', 'bob', 1000, 5)).toEqual({ granted: false, ttlRemainingMs: 750 });
  });

  it('answers a conflict for another limit, with the current one, from anyone', async () => {
    await grantShared('s', 'alice', 1000, 3, 'ka');
    expect(await shared('s', 'bob', 1000, 4)).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    // Even the holder itself cannot change the limit in place.
    expect(await shared('s', 'alice', 1000, 4, 'ka')).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    // Once every holder is gone, the next shared grant sets a new limit.
    expect(await backend.revoke!('s')).toBe(true);
    await grantShared('s', 'bob', 1000, 4);
    expect((await backend.inspect('s'))?.limit).toBe(4);
  });

  it('refreshes the same owner and key in the same mode and limit, keeping the token', async () => {
    const first = await grantShared('s', 'alice', 1000, 2, 'ka');
    await grantShared('s', 'bob', 1000, 2, 'kb');
    clock.advance(900);
    const again = await grantShared('s', 'alice', 1000, 2, 'ka');
    expect(again.token).toBe(first.token);
    const state = await backend.inspect('s');
    expect(state?.holders).toEqual([
      { owner: 'alice', token: first.token, ttlRemainingMs: 1000 },
      { owner: 'bob', token: 2n, ttlRemainingMs: 100 },
    ]);
    // The same owner label without alice's key is another requester: the name is full.
    expect(await shared('s', 'alice', 1000, 2, 'other')).toEqual({
      granted: false,
      ttlRemainingMs: 100,
    });
  });

  it('answers a mode conflict to the holder asking for the other mode, both ways', async () => {
    await grantShared('s', 'alice', 1000, 3, 'ka');
    expect(
      await backend.tryAcquire({ name: 's', owner: 'alice', ttlMs: 1000, keyHash: 'ka' }),
    ).toEqual({ granted: false, conflict: { field: 'mode' } });
    await grantExclusive('x', 'bob', 1000, 'kb');
    expect(await shared('x', 'bob', 1000, 3, 'kb')).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    // Another key is another requester, not the holder: a plain refusal.
    expect(await shared('x', 'bob', 1000, 3, 'other')).toEqual({
      granted: false,
      ttlRemainingMs: 1000,
    });
    // Nothing changed hands.
    expect((await backend.inspect('s'))?.mode).toBe('shared');
    expect((await backend.inspect('x'))?.mode).toBe('exclusive');
  });

  it('releases and extends one holder by token and key hash, leaving the others', async () => {
    const a = await grantShared('s', 'alice', 1000, 3, 'ka');
    const b = await grantShared('s', 'bob', 1000, 3, 'kb');
    const c = await grantShared('s', 'carol', 1000, 3, 'kc');
    expect(await backend.release({ name: 's', token: b.token, keyHash: 'wrong' })).toBe(false);
    expect(
      await backend.extend({ name: 's', token: b.token, keyHash: 'ka', ttlMs: 5000 }),
    ).toBeNull();
    expect(await backend.extend({ name: 's', token: a.token, keyHash: 'ka', ttlMs: 5000 })).toEqual(
      { name: 's', owner: 'alice', token: a.token, ttlMs: 5000 },
    );
    expect(await backend.release({ name: 's', token: c.token, keyHash: 'kc' })).toBe(true);
    expect(await backend.release({ name: 's', token: c.token, keyHash: 'kc' })).toBe(false);
    // The top-level fields are those of the highest token still holding (bob's now).
    expect(await backend.inspect('s')).toEqual({
      name: 's',
      owner: 'bob',
      token: b.token,
      ttlRemainingMs: 1000,
      mode: 'shared',
      limit: 3,
      holders: [
        { owner: 'alice', token: a.token, ttlRemainingMs: 5000 },
        { owner: 'bob', token: b.token, ttlRemainingMs: 1000 },
      ],
    });
    // A token that never held here, and a token-only release (an operator's).
    expect(await backend.release({ name: 's', token: 99n })).toBe(false);
    expect(await backend.release({ name: 's', token: b.token })).toBe(true);
    clock.advance(1000);
    expect((await backend.inspect('s'))?.holders).toEqual([
      { owner: 'alice', token: a.token, ttlRemainingMs: 4000 },
    ]);
    expect(await backend.release({ name: 's', token: a.token, keyHash: 'ka' })).toBe(true);
    expect(await backend.inspect('s')).toBeNull();
  });

  it('expires each holder at its own deadline, one event per holder', async () => {
    const events: LockEvent[] = [];
    backend.watch('s', (event) => events.push(event));
    const a = await grantShared('s', 'alice', 1000, 2);
    const b = await grantShared('s', 'bob', 3000, 2);
    expect(events).toEqual([
      { name: 's', type: 'acquired', token: a.token, owner: 'alice', mode: 'shared', holders: 1 },
      { name: 's', type: 'acquired', token: b.token, owner: 'bob', mode: 'shared', holders: 2 },
    ]);
    clock.advance(999);
    expect(events).toHaveLength(2);
    clock.advance(1);
    expect(events.at(-1)).toEqual({
      name: 's',
      type: 'expired',
      token: a.token,
      owner: 'alice',
      mode: 'shared',
      holders: 1,
    });
    expect((await backend.inspect('s'))?.holders?.map((h) => h.owner)).toEqual(['bob']);
    clock.advance(2000);
    expect(events.at(-1)).toMatchObject({ type: 'expired', token: b.token, holders: 0 });
    expect(events).toHaveLength(4);
    expect(await backend.inspect('s')).toBeNull();
  });

  it('ends an expired holder before a request looks, even if the timer has not fired', async () => {
    // A clock whose timers never fire: the request itself must see the end.
    let now = 0;
    const frozen = await embeddedBackend({
      clock: { now: () => now, setTimer: () => ({ cancel: () => {} }) },
    });
    const events: LockEvent[] = [];
    frozen.watch('s', (event) => events.push(event));
    await frozen.tryAcquire({ name: 's', owner: 'alice', ttlMs: 1000, mode: 'shared', limit: 1 });
    await frozen.tryAcquire({ name: 'x', owner: 'alice', ttlMs: 1000, mode: 'shared', limit: 1 });
    now = 1000;
    const next = await frozen.tryAcquire({
      name: 's',
      owner: 'bob',
      ttlMs: 1000,
      mode: 'shared',
      limit: 1,
    });
    expect(next).toMatchObject({ granted: true, grant: { token: 3n } });
    expect(events.map((e) => [e.type, e.owner])).toEqual([
      ['acquired', 'alice'],
      ['expired', 'alice'],
      ['acquired', 'bob'],
    ]);
    // alice's other lease ended too; listed no more.
    expect((await frozen.list!('')).map((s) => s.name)).toEqual(['s']);
    await frozen.close();
  });

  it('revokes every holder, with one event each', async () => {
    const events: LockEvent[] = [];
    backend.watch('s', (event) => events.push(event));
    const a = await grantShared('s', 'alice', 1000, 5);
    const b = await grantShared('s', 'bob', 1000, 5);
    events.length = 0;
    expect(await backend.revoke!('s')).toBe(true);
    expect(events.map((e) => [e.type, e.token, e.holders])).toEqual([
      ['revoked', a.token, 1],
      ['revoked', b.token, 0],
    ]);
    expect(await backend.inspect('s')).toBeNull();
    expect(await backend.revoke!('s')).toBe(false);
    expect(await backend.release({ name: 's', token: a.token })).toBe(false);
  });

  it('gives every grant a token above every earlier one, across modes', async () => {
    const r1 = await grantShared('n', 'r1', 1000, 10);
    const r2 = await grantShared('n', 'r2', 1000, 10);
    await backend.release({ name: 'n', token: r1.token });
    await backend.release({ name: 'n', token: r2.token });
    const w = await grantExclusive('n', 'w', 1000);
    expect(w.token).toBeGreaterThan(r2.token);
    await backend.release({ name: 'n', token: w.token });
    const r3 = await grantShared('n', 'r3', 1000, 10);
    expect(r3.token).toBeGreaterThan(w.token);
  });

  it('lists shared names with their holders', async () => {
    await grantShared('jobs/a', 'alice', 1000, 2);
    await grantShared('jobs/a', 'bob', 2000, 2);
    await grantExclusive('jobs/b', 'carol', 1000);
    await grantShared('other', 'dave', 1000, 2);
    const listed = await backend.list!('jobs/');
    expect(listed.map((s) => [s.name, s.owner, s.mode, s.limit, s.holders?.length])).toEqual([
      ['jobs/a', 'bob', 'shared', 2, 2],
      ['jobs/b', 'carol', 'exclusive', undefined, 1],
    ]);
    clock.advance(1000);
    // alice's and carol's leases ran out: listed no more.
    expect((await backend.list!('jobs/')).map((s) => [s.name, s.holders?.length])).toEqual([
      ['jobs/a', 1],
    ]);
  });

  it('refuses a bad mode or limit with INVALID_PARAMS and the field', async () => {
    const refusal = async (request: AcquireRequest) => {
      const error = await backend.tryAcquire(request).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DlmError);
      return [(error as DlmError).code, (error as DlmError).details?.field];
    };
    const base = { name: 'n', owner: 'o', ttlMs: 1000 };
    expect(await refusal({ ...base, mode: 'upgradable' as never })).toEqual([
      'INVALID_PARAMS',
      'mode',
    ]);
    for (const limit of [0, -1, 1.5, Number.NaN, undefined, '3' as never]) {
      expect(await refusal({ ...base, mode: 'shared', limit })).toEqual([
        'INVALID_PARAMS',
        'limit',
      ]);
    }
    expect(await backend.inspect('n')).toBeNull();
  });

  it('keeps holders ordered by token when holders end out of order', async () => {
    const tokens: bigint[] = [];
    for (let i = 0; i < 20; i++) tokens.push((await grantShared('s', `o${i}`, 1000 + i, 20)).token);
    for (const i of [3, 17, 0, 19, 8]) {
      expect(await backend.release({ name: 's', token: tokens[i]! })).toBe(true);
    }
    const state = await backend.inspect('s');
    const left = tokens.filter((_, i) => ![3, 17, 0, 19, 8].includes(i));
    expect(state?.holders?.map((h) => h.token)).toEqual(left);
    expect(state?.token).toBe(left.at(-1));
    // Each remaining one still releases by its own token.
    for (const token of left) expect(await backend.release({ name: 's', token })).toBe(true);
    expect(await backend.inspect('s')).toBeNull();
  });

  it('fills a name to 10,000 shared holders (the default maxHolders) and refuses the next', async () => {
    const started = performance.now();
    const tokens: bigint[] = [];
    for (let i = 0; i < 10_000; i++) {
      tokens.push((await grantShared('read', `r${i}`, 60_000 + i, 10_000, `k${i}`)).token);
    }
    const filledMs = performance.now() - started;
    expect(await shared('read', 'late', 1000, 10_000)).toEqual({
      granted: false,
      ttlRemainingMs: 60_000,
    });
    const state = await backend.inspect('read');
    expect(state?.holders).toHaveLength(10_000);
    expect(state?.token).toBe(tokens.at(-1));
    const releaseStarted = performance.now();
    for (let i = 0; i < 10_000; i += 2) {
      expect(await backend.release({ name: 'read', token: tokens[i]!, keyHash: `k${i}` })).toBe(
        true,
      );
    }
    const releasedMs = performance.now() - releaseStarted;
    console.log(
      `10,000 shared holders on one name: filled in ${filledMs.toFixed(0)} ms, half released in ${releasedMs.toFixed(0)} ms`,
    );
    expect((await backend.inspect('read'))?.holders).toHaveLength(5_000);
    // Quadratic work would be ~50M steps; loose bounds for a shared machine.
    expect(filledMs).toBeLessThan(5_000);
    expect(releasedMs).toBeLessThan(5_000);
  });

  it('finds a holder among many by owner and key, also when two holders share a key hash', async () => {
    const tokens: bigint[] = [];
    for (let i = 0; i < 40; i++)
      tokens.push((await grantShared('s', `r${i}`, 1000, 100, `k${i}`)).token);
    clock.advance(500);
    // A refresh deep in the list: same token, lease reset.
    expect((await grantShared('s', 'r30', 1000, 100, 'k30')).token).toBe(tokens[30]);
    // The owner label with another key, and the key with another owner label: new holders.
    const otherKey = await grantShared('s', 'r30', 1000, 100, 'k30-other');
    const otherOwner = await grantShared('s', 'someone-else', 1000, 100, 'k5');
    expect(otherKey.token).toBeGreaterThan(tokens[39]!);
    expect(otherOwner.token).toBeGreaterThan(otherKey.token);
    // Both holders of key k5 are still told apart by owner.
    expect((await grantShared('s', 'r5', 1000, 100, 'k5')).token).toBe(tokens[5]);
    expect((await grantShared('s', 'someone-else', 1000, 100, 'k5')).token).toBe(otherOwner.token);
    // An exclusive request from a holder is still a mode conflict, whichever way it is found.
    expect(
      await backend.tryAcquire({ name: 's', owner: 'r12', ttlMs: 1000, keyHash: 'k12' }),
    ).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    const state = await backend.inspect('s');
    expect(state?.holders).toHaveLength(42);
    expect(state?.holders?.find((h) => h.token === tokens[30])?.ttlRemainingMs).toBe(1000);
    expect(state?.holders?.find((h) => h.token === tokens[0])?.ttlRemainingMs).toBe(500);
    clock.advance(500);
    // The ones not refreshed expired; the refreshed ones and the newcomers hold.
    expect((await backend.inspect('s'))?.holders?.map((h) => h.owner)).toEqual([
      'r5',
      'r30',
      'r30',
      'someone-else',
    ]);
  });
});
