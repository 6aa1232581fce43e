import { granted } from '@dlm/conformance';
import { createManualClock, type LockBackend, type LockEvent, type ManualClock } from '@dlm/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { embeddedBackend } from '../src/index.js';

// In memory, on a manual clock: every deadline below is exact, so the tests can say "expires
// at 1000 ms, not at 999".
describe('embedded backend semantics (in memory, manual clock)', () => {
  let clock: ManualClock;
  let backend: LockBackend;
  const logged: string[] = [];

  beforeEach(async () => {
    clock = createManualClock();
    logged.length = 0;
    backend = await embeddedBackend({ clock, logger: (line) => logged.push(line) });
  });
  afterEach(() => backend.close());

  const grant = (name: string, owner: string, ttlMs: number) =>
    granted(backend, name, owner, ttlMs);

  it('declares its capabilities', () => {
    expect(backend.kind).toBe('embedded');
    const { fencing, minTtlMs, ttlGranularityMs, ...flags } = backend.capabilities;
    expect([fencing, minTtlMs, ttlGranularityMs]).toEqual(['strict', 1, 1]);
    const declared = { durableAcrossRestart: false, fairQueue: false, expiryEvents: true };
    expect(flags).toEqual({ ...declared, sharedModes: true, lockDelay: true, maxHold: true });
  });

  it('grants a free lock and refuses another owner with the remaining TTL', async () => {
    const granted = await grant('a', 'alice', 1000);
    expect(granted).toEqual({ name: 'a', owner: 'alice', token: 1n, ttlMs: 1000 });
    clock.advance(300);
    expect(await backend.tryAcquire({ name: 'a', owner: 'bob', ttlMs: 1000 })).toEqual({
      granted: false,
      ttlRemainingMs: 700,
    });
    expect(await backend.inspect('a')).toEqual({
      name: 'a',
      owner: 'alice',
      token: 1n,
      ttlRemainingMs: 700,
      mode: 'exclusive',
      holders: [{ owner: 'alice', token: 1n, ttlRemainingMs: 700 }],
    });
    expect(await backend.inspect('b')).toBeNull();
  });

  it('re-acquire by the same owner returns the same token and refreshes the lease', async () => {
    const first = await grant('a', 'alice', 1000);
    clock.advance(900);
    const again = await grant('a', 'alice', 500);
    expect(again.token).toBe(first.token);
    expect(again.ttlMs).toBe(500);
    expect((await backend.inspect('a'))?.ttlRemainingMs).toBe(500);
    clock.advance(499);
    expect(await backend.inspect('a')).not.toBeNull();
    clock.advance(1);
    expect(await backend.inspect('a')).toBeNull();
  });

  it('raises a TTL below 1 ms to 1 and rounds fractions up', async () => {
    expect((await grant('a', 'alice', 0)).ttlMs).toBe(1);
    expect((await grant('b', 'alice', 2.2)).ttlMs).toBe(3);
    await expect(backend.tryAcquire({ name: 'c', owner: 'x', ttlMs: Number.NaN })).rejects.toThrow(
      /ttlMs/,
    );
  });

  it('release(token) by a stale holder leaves the new holder alone', async () => {
    const old = await grant('a', 'alice', 100);
    clock.advance(100);
    const current = await grant('a', 'bob', 1000);
    expect(current.token).toBeGreaterThan(old.token);
    expect(await backend.release({ name: 'a', token: old.token })).toBe(false);
    expect(await backend.extend({ name: 'a', token: old.token, ttlMs: 5000 })).toBeNull();
    expect(await backend.inspect('a')).toMatchObject({
      owner: 'bob',
      token: current.token,
      ttlRemainingMs: 1000,
    });
    expect(await backend.release({ name: 'a', token: current.token })).toBe(true);
    expect(await backend.release({ name: 'a', token: current.token })).toBe(false);
    expect(await backend.inspect('a')).toBeNull();
  });

  it('extend resets the lease to ttlMs from now, even when shorter', async () => {
    const { token } = await grant('a', 'alice', 1000);
    clock.advance(600);
    expect(await backend.extend({ name: 'a', token, ttlMs: 2000 })).toEqual({
      name: 'a',
      owner: 'alice',
      token,
      ttlMs: 2000,
    });
    clock.advance(1999);
    expect(await backend.inspect('a')).toMatchObject({ ttlRemainingMs: 1 });
    expect(await backend.extend({ name: 'a', token, ttlMs: 10 })).not.toBeNull();
    clock.advance(10);
    expect(await backend.inspect('a')).toBeNull();
    expect(await backend.extend({ name: 'a', token, ttlMs: 10 })).toBeNull();
  });

  it('emits expired exactly when the lease runs out, with its token and owner', async () => {
    const events: LockEvent[] = [];
    backend.watch('a', (event) => events.push(event));
    const { token } = await grant('a', 'alice', 1000);
    expect(events).toEqual([
      { name: 'a', type: 'acquired', token, owner: 'alice', mode: 'exclusive', holders: 1 },
    ]);
    clock.advance(999);
    expect(events).toHaveLength(1);
    clock.advance(1);
    expect(events[1]).toEqual({
      name: 'a',
      type: 'expired',
      token,
      owner: 'alice',
      mode: 'exclusive',
      holders: 0,
    });
    expect(await backend.inspect('a')).toBeNull();
  });

  it('uses one timer for many leases and expires each at its own deadline', async () => {
    const expiredAt = new Map<string, number>();
    const names = Array.from({ length: 50 }, (_, i) => `n${i}`);
    for (const name of names) {
      backend.watch(name, (event) => {
        if (event.type === 'expired') expiredAt.set(name, clock.now());
      });
    }
    // Deadlines in scrambled order, some moved later by an extend and some released.
    const tokens = new Map<string, bigint>();
    for (const [i, name] of names.entries()) {
      tokens.set(name, (await grant(name, 'o', ((i * 37) % 50) * 10 + 10)).token);
    }
    await backend.extend({ name: 'n3', token: tokens.get('n3')!, ttlMs: 2000 });
    await backend.release({ name: 'n4', token: tokens.get('n4')! });
    clock.advance(3000);
    for (const [i, name] of names.entries()) {
      if (name === 'n4') expect(expiredAt.has(name)).toBe(false);
      else if (name === 'n3') expect(expiredAt.get(name)).toBe(2000);
      else expect(expiredAt.get(name)).toBe(((i * 37) % 50) * 10 + 10);
    }
  });

  it('revoke ends the lease whoever holds it and says so to watchers', async () => {
    const events: LockEvent[] = [];
    backend.watch('a', (event) => events.push(event));
    const { token } = await grant('a', 'alice', 1000);
    expect(await backend.revoke!('a')).toBe(true);
    expect(events.at(-1)).toEqual({
      name: 'a',
      type: 'revoked',
      token,
      owner: 'alice',
      mode: 'exclusive',
      holders: 0,
    });
    expect(await backend.revoke!('a')).toBe(false);
    expect(await backend.release({ name: 'a', token })).toBe(false);
    expect((await grant('a', 'bob', 1000)).token).toBeGreaterThan(token);
  });

  it('lists held locks by prefix, sorted, without expired ones', async () => {
    await grant('jobs/b', 'x', 1000);
    await grant('jobs/a', 'y', 100);
    await grant('jobs/c', 'z', 10);
    await grant('other', 'x', 1000);
    clock.advance(10);
    expect((await backend.list!('jobs/')).map((s) => [s.name, s.owner, s.ttlRemainingMs])).toEqual([
      ['jobs/a', 'y', 90],
      ['jobs/b', 'x', 990],
    ]);
    expect(await backend.list!('')).toHaveLength(3);
  });

  it('hands out strictly increasing tokens across release and expiry', async () => {
    const seen: bigint[] = [];
    for (let i = 0; i < 20; i++) {
      const { token } = await grant('a', `owner-${i}`, 50);
      seen.push(token);
      if (i % 2 === 0) await backend.release({ name: 'a', token });
      else clock.advance(50);
    }
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1]!);
  });

  it('delivers events after the state change: a listener can take the lock at once', async () => {
    const events: string[] = [];
    const taken: bigint[] = [];
    backend.watch('a', (event) => {
      events.push(`${event.type}:${event.owner}`);
      if (event.type === 'released' || event.type === 'expired') {
        void backend.tryAcquire({ name: 'a', owner: 'waiter', ttlMs: 1000 }).then((result) => {
          if (result.granted) taken.push(result.grant.token);
        });
      }
    });
    const { token } = await grant('a', 'alice', 1000);
    await backend.release({ name: 'a', token });
    await Promise.resolve();
    expect(taken).toHaveLength(1);
    // In state order, never "acquired:waiter" before "released:alice".
    expect(events).toEqual(['acquired:alice', 'released:alice', 'acquired:waiter']);
  });

  it('counts one function watched twice as two subscriptions, each ended on its own', async () => {
    const calls: string[] = [];
    const listener = (event: LockEvent) => calls.push(event.type);
    const first = backend.watch('a', listener);
    const second = backend.watch('a', listener);
    const { token } = await grant('a', 'alice', 1000);
    expect(calls).toEqual(['acquired', 'acquired']);
    first();
    first();
    await backend.release({ name: 'a', token });
    expect(calls).toEqual(['acquired', 'acquired', 'released']);
    second();
    await grant('a', 'bob', 1000);
    expect(calls).toHaveLength(3);
  });

  it('survives a throwing listener and a listener unsubscribing during dispatch', async () => {
    const calls: string[] = [];
    backend.watch('a', () => {
      throw new Error('boom');
    });
    const unsubscribeSecond = backend.watch('a', () => calls.push('second'));
    backend.watch('a', () => {
      calls.push('third');
      unsubscribeSecond();
      unsubscribeFourth();
    });
    const unsubscribeFourth = backend.watch('a', () => calls.push('fourth'));
    const { token } = await grant('a', 'alice', 1000);
    expect(calls).toEqual(['second', 'third']);
    expect(logged.some((line) => line.includes('boom'))).toBe(true);
    await backend.release({ name: 'a', token });
    expect(calls).toEqual(['second', 'third', 'third']);
    expect((await grant('a', 'bob', 10)).owner).toBe('bob');
  });

  it('holds a name back for lockDelayMs after an expiry, to the millisecond, then grants it', async () => {
    const first = await backend.tryAcquire({
      name: 'd',
      owner: 'a',
      ttlMs: 500,
      lockDelayMs: 1000,
    });
    expect(first.granted).toBe(true);
    clock.advance(500);
    expect(await backend.inspect('d')).toBeNull();
    expect(await backend.tryAcquire({ name: 'd', owner: 'b', ttlMs: 500 })).toEqual({
      granted: false,
      ttlRemainingMs: 1000,
      lockDelayRemainingMs: 1000,
    });
    clock.advance(999);
    expect(await backend.lockDelayOf!('d')).toBe(1);
    expect((await backend.tryAcquire({ name: 'd', owner: 'b', ttlMs: 500 })).granted).toBe(false);
    clock.advance(1);
    expect(await backend.lockDelayOf!('d')).toBe(0);
    const next = await backend.tryAcquire({ name: 'd', owner: 'b', ttlMs: 500 });
    expect(next.granted && next.grant.token).toBe(2n);
  });

  it('ends a lease with a lock-delay with no delay on release, and from the moment of a revoke', async () => {
    const held = await grantWithDelay('r', 10_000, 1000);
    expect(await backend.release({ name: 'r', token: held })).toBe(true);
    expect((await backend.tryAcquire({ name: 'r', owner: 'b', ttlMs: 500 })).granted).toBe(true);
    await grantWithDelay('v', 10_000, 1000);
    clock.advance(3000);
    expect(await backend.revoke!('v')).toBe(true);
    clock.advance(999);
    expect(await backend.lockDelayOf!('v')).toBe(1);
    clock.advance(1);
    expect((await backend.tryAcquire({ name: 'v', owner: 'b', ttlMs: 500 })).granted).toBe(true);
  });

  it('starts the delay at the end an extend moved the lease to', async () => {
    const held = await grantWithDelay('x', 500, 1000);
    clock.advance(400);
    expect(await backend.extend({ name: 'x', token: held, ttlMs: 2000 })).not.toBeNull();
    clock.advance(2000);
    expect(await backend.lockDelayOf!('x')).toBe(1000);
  });

  const grantWithDelay = async (name: string, ttlMs: number, lockDelayMs: number) => {
    const result = await backend.tryAcquire({ name, owner: 'a', ttlMs, lockDelayMs });
    if (!result.granted) throw new Error('not granted');
    return result.grant.token;
  };

  it('rejects every operation with UNAVAILABLE after close', async () => {
    await grant('a', 'alice', 1000);
    await backend.close();
    await expect(backend.tryAcquire({ name: 'a', owner: 'b', ttlMs: 1 })).rejects.toMatchObject({
      code: 'UNAVAILABLE',
    });
    await expect(backend.release({ name: 'a', token: 1n })).rejects.toMatchObject({
      code: 'UNAVAILABLE',
    });
    await expect(backend.inspect('a')).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await backend.close();
  });
});
