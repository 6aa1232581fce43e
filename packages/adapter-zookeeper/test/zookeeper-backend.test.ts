import { failure, granted, lockName, sleep, until } from '@dlm/conformance';
import { isDlmError, type LockBackend, type LockEvent } from '@dlm/core';
import {
  startZooKeeper,
  type ZooKeeperService,
  zookeeperAvailable,
  zookeeperManaged,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zookeeperBackend } from '../src/index.js';

const run = zookeeperAvailable();

describe.skipIf(!run)('zookeeper backend primitives', () => {
  let zk: ZooKeeperService;
  let a: LockBackend;
  let b: LockBackend;
  const extra: LockBackend[] = [];
  const open = (commandTimeoutMs = 2_000, more: { ephemeral?: boolean } = {}) => {
    const backend = zookeeperBackend({
      connect: zk.connectString,
      prefix: '/dlm-test',
      sessionTimeoutMs: 2_000,
      commandTimeoutMs,
      ...more,
    });
    extra.push(backend);
    return backend;
  };
  beforeAll(async () => {
    zk = await startZooKeeper();
    a = open();
    b = open();
  });
  afterAll(async () => {
    await Promise.all(extra.map((backend) => backend.close()));
    await zk?.stop();
  });

  it('declares strict fencing with millisecond leases, a fair queue, shared modes, lock-delays and no expiry events', () => {
    expect(a.kind).toBe('zookeeper');
    const { fencing, minTtlMs, ttlGranularityMs, ...flags } = a.capabilities;
    expect([fencing, minTtlMs, ttlGranularityMs]).toEqual(['strict', 100, 1]);
    const declared = { durableAcrossRestart: true, fairQueue: true, expiryEvents: false };
    expect(flags).toEqual({ ...declared, sharedModes: true, lockDelay: true, maxHold: true });
    // An ephemeral holder can vanish unrecorded with its session: no lock-delay then.
    expect(open(2_000, { ephemeral: true }).capabilities.lockDelay).toBe(false);
  });

  it('tokens are czxids: strictly increasing across sessions, the same for the same owner', async () => {
    const name = lockName('tokens');
    let last = 0n;
    for (let i = 0; i < 8; i += 1) {
      const backend = i % 2 ? a : b;
      const grant = await granted(backend, name, `o${i}`, 5_000);
      expect(grant.token).toBeGreaterThan(last);
      last = grant.token;
      // Same owner through the other session: same token, refreshed lease.
      const again = await granted(i % 2 ? b : a, name, `o${i}`, 5_000);
      expect(again.token).toBe(last);
      expect(await backend.release({ name, token: last })).toBe(true);
      expect(await backend.release({ name, token: last })).toBe(false);
    }
  });

  it("leases run on ZooKeeper's clock: the next contender takes an expired lease over", async () => {
    const name = lockName('expiry');
    const first = await granted(a, name, 'first', 400);
    const held = await b.tryAcquire({ name, owner: 'second', ttlMs: 5_000 });
    expect(held.granted).toBe(false);
    if (!held.granted) {
      expect(held.ttlRemainingMs).toBeGreaterThan(0);
      expect(held.ttlRemainingMs).toBeLessThanOrEqual(400);
    }
    expect((await b.inspect(name))?.owner).toBe('first');
    await sleep(450);
    // Nobody deleted the node yet, but on ZooKeeper's clock the lease is over.
    expect(await b.inspect(name)).toBeNull();
    expect(await a.extend({ name, token: first.token, ttlMs: 5_000 })).toBeNull();
    const second = await granted(b, name, 'second', 5_000);
    expect(second.token).toBeGreaterThan(first.token);
    expect(await a.release({ name, token: first.token })).toBe(false);
    expect((await a.inspect(name))?.token).toBe(second.token);
  });

  it('extend resets the lease and keeps the token; a wrong token is refused', async () => {
    const name = lockName('extend');
    const grant = await granted(a, name, 'x', 300);
    const extended = await a.extend({ name, token: grant.token, ttlMs: 5_000 });
    expect(extended).toMatchObject({ token: grant.token, owner: 'x', ttlMs: 5_000 });
    await sleep(400);
    const state = await b.inspect(name);
    expect(state?.token).toBe(grant.token);
    expect(state?.ttlRemainingMs).toBeGreaterThan(4_000);
    expect(await a.extend({ name, token: grant.token + 1n, ttlMs: 5_000 })).toBeNull();
  });

  it('a lease extended through another backend is still released and extended by token where it was granted', async () => {
    const name = lockName('known-lease');
    const grant = await granted(a, name, 'holder', 5_000);
    // b moves the holder node's version past what a remembers of its own grant.
    expect((await b.extend({ name, token: grant.token, ttlMs: 5_000 }))?.token).toBe(grant.token);
    expect((await a.extend({ name, token: grant.token, ttlMs: 6_000 }))?.ttlMs).toBe(6_000);
    expect((await b.extend({ name, token: grant.token, ttlMs: 5_000 }))?.token).toBe(grant.token);
    expect(await a.release({ name, token: grant.token })).toBe(true);
    expect(await a.release({ name, token: grant.token })).toBe(false);
    expect(await b.inspect(name)).toBeNull();
  });

  it('watch tells grants, releases, revocations and expiries apart', async () => {
    const name = lockName('events');
    const events: LockEvent[] = [];
    const stop = b.watch(name, (event) => events.push(event));
    await sleep(100);
    const first = await granted(a, name, 'a', 5_000);
    await until(() => events.length >= 1, 2_000);
    await a.release({ name, token: first.token });
    await until(() => events.length >= 2, 2_000);
    const second = await granted(a, name, 'b', 5_000);
    await until(() => events.length >= 3, 2_000);
    expect(await a.revoke!(name)).toBe(true);
    await until(() => events.length >= 4, 2_000);
    const third = await granted(a, name, 'c', 200);
    await until(() => events.length >= 5, 2_000);
    await sleep(250);
    const fourth = await granted(a, name, 'd', 5_000);
    await until(() => events.length >= 7, 2_000);
    stop();
    expect(events).toEqual([
      { name, type: 'acquired', token: first.token, owner: 'a', mode: 'exclusive' },
      { name, type: 'released', token: first.token, owner: 'a' },
      { name, type: 'acquired', token: second.token, owner: 'b', mode: 'exclusive' },
      { name, type: 'revoked', token: second.token, owner: 'b' },
      { name, type: 'acquired', token: third.token, owner: 'c', mode: 'exclusive' },
      { name, type: 'expired', token: third.token, owner: 'c' },
      { name, type: 'acquired', token: fourth.token, owner: 'd', mode: 'exclusive' },
    ]);
  });

  it('a lock outlives the backend (and session) that granted it: another extends and releases it by token', async () => {
    const name = lockName('outlives');
    const first = open();
    const grant = await granted(first, name, 'holder', 30_000);
    await first.close();
    await sleep(300);
    const state = await b.inspect(name);
    expect(state?.token).toBe(grant.token);
    expect((await b.tryAcquire({ name, owner: 'intruder', ttlMs: 5_000 })).granted).toBe(false);
    const extended = await b.extend({ name, token: grant.token, ttlMs: 30_000 });
    expect(extended?.token).toBe(grant.token);
    expect(await b.release({ name, token: grant.token })).toBe(true);
    expect(await b.inspect(name)).toBeNull();
  });

  it("with ephemeral: true, closing a backend ends its session: its locks are free at once, seen as 'expired'", async () => {
    const name = lockName('session');
    const owner = open(2_000, { ephemeral: true });
    const grant = await granted(owner, name, 'gone', 30_000);
    const events: LockEvent[] = [];
    const stop = b.watch(name, (event) => events.push(event));
    await sleep(100);
    await owner.close();
    await until(() => events.length >= 1, 2_000);
    stop();
    expect(events).toEqual([{ name, type: 'expired', token: grant.token, owner: 'gone' }]);
    expect((await granted(b, name, 'next', 5_000)).token).toBeGreaterThan(grant.token);
  });

  it("with ephemeral: true, the shared holders of a closed backend end, each seen 'expired'", async () => {
    const name = lockName('ephemeral-shared');
    const ephemeral = open(2_000, { ephemeral: true });
    const shared = { mode: 'shared', limit: 3, ttlMs: 10_000 } as const;
    const events: LockEvent[] = [];
    const stop = b.watch(name, (event) => events.push(event));
    await sleep(100);
    const r1 = await ephemeral.tryAcquire({ name, owner: 'r1', ...shared });
    const r2 = await ephemeral.tryAcquire({ name, owner: 'r2', ...shared });
    const r3 = await b.tryAcquire({ name, owner: 'r3', ...shared });
    if (!r1.granted || !r2.granted || !r3.granted) throw new Error('expected three holders');
    await until(() => events.filter((event) => event.type === 'acquired').length >= 3, 5_000);
    await ephemeral.close();
    await until(() => events.filter((event) => event.type === 'expired').length >= 2, 5_000);
    stop();
    expect(events.filter((event) => event.type === 'expired').map((event) => event.token)).toEqual([
      r1.grant.token,
      r2.grant.token,
    ]);
    expect((await a.inspect(name))?.holders?.map((each) => each.token)).toEqual([r3.grant.token]);
  });

  it('list returns the live locks under a name prefix', async () => {
    const base = lockName('list');
    await granted(a, `${base}/1`, 'p', 5_000);
    await granted(b, `${base}/2`, 'q', 5_000);
    await granted(a, `${base}x`, 'r', 5_000);
    await granted(a, `${base}/expired`, 's', 100);
    await sleep(150);
    const listed = await a.list!(`${base}/`);
    expect(listed.map((state) => state.owner).sort()).toEqual(['p', 'q']);
  });

  it('sweep ends expired leases of names nobody contends for, then deletes the unused name nodes', async () => {
    const backend = zookeeperBackend({
      connect: zk.connectString,
      prefix: `/dlm-sweep-${process.pid}-${Date.now()}`,
      sessionTimeoutMs: 2_000,
      // No timer: this test sweeps by hand (and a name node counts as unused at once).
      sweepIntervalMs: 0,
    });
    extra.push(backend);
    const abandoned = lockName('abandoned');
    const live = lockName('live');
    await granted(backend, abandoned, 'gone', 100);
    const held = await granted(backend, live, 'here', 30_000);
    await sleep(150);
    // First sweep: the expired holder goes (marker `expired`); the live one stays.
    expect(await backend.sweep()).toBe(1);
    expect((await backend.list!(''))?.map((state) => state.name)).toEqual([live]);
    // The next sweep finds the name node unused (no children, idle for the interval): it goes.
    expect(await backend.sweep()).toBe(1);
    expect(await backend.sweep()).toBe(0);
    // A contender for the swept name makes its node again; tokens still grow.
    const again = await granted(backend, abandoned, 'back', 5_000);
    expect(again.token).toBeGreaterThan(held.token);
    expect((await backend.inspect(live))?.token).toBe(held.token);
  });

  describe.skipIf(!zookeeperManaged())('faults', () => {
    it('a stalled ZooKeeper gives UNAVAILABLE in bounded time, and the unanswered create does not wedge the lock', async () => {
      const name = lockName('stall');
      const backend = open(500);
      await granted(backend, lockName('warm-up'), 'w', 5_000);
      const member = zk.members[0]!;
      member.process.pause();
      const started = performance.now();
      const stalled = backend.tryAcquire({ name, owner: 'stalled', ttlMs: 30_000 });
      const error = await failure(stalled).finally(() => member.process.resume());
      const elapsed = performance.now() - started;
      expect(error.code).toBe('UNAVAILABLE');
      expect(elapsed).toBeLessThan(1_000);
      // The create reached ZooKeeper and ran once it resumed; the adapter finds its node by
      // the attempt id and deletes it, so the lock is free, not held for 30 s by nobody.
      let state = await b.inspect(name);
      const deadline = performance.now() + 3_000;
      while (state && performance.now() < deadline) {
        await sleep(50);
        state = await b.inspect(name);
      }
      expect(state).toBeNull();
      expect((await granted(b, name, 'next', 5_000)).owner).toBe('next');
    });

    it('with ephemeral: true, a lost ZooKeeper tells holders their locks are lost within the session timeout', async () => {
      const name = lockName('lost');
      const backend = open(500, { ephemeral: true });
      const grant = await granted(backend, name, 'holder', 60_000);
      const events: LockEvent[] = [];
      backend.watch(name, (event) => events.push(event));
      const member = zk.members[0]!;
      await member.process.kill();
      const killed = performance.now();
      const unavailable = await backend.tryAcquire({ name, owner: 'x', ttlMs: 5_000 }).then(
        () => undefined,
        (failure: unknown) => failure,
      );
      expect(isDlmError(unavailable, 'UNAVAILABLE')).toBe(true);
      await until(() => events.some((event) => event.type === 'expired'), 6_000);
      const lostAfterMs = performance.now() - killed;
      expect(events).toContainEqual({ name, type: 'expired', token: grant.token, owner: 'holder' });
      expect(lostAfterMs).toBeLessThan(5_000);
      await member.process.start();
      // Back in the same session, the adapter deletes the node its holder was told it lost.
      let state = await b.inspect(name).catch(() => 'unknown' as const);
      const deadline = performance.now() + 8_000;
      while (state !== null && performance.now() < deadline) {
        await sleep(50);
        state = await b.inspect(name).catch(() => 'unknown' as const);
      }
      expect(state).toBeNull();
    });
  });
});
