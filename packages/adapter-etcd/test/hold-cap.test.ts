import { createLockService, hashLeaseKey, type LockBackend, type QueueStep } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockNames, useEtcd } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-hold-cap');
const prefix = 'hold-cap-test/';
const keyHash = hashLeaseKey('lease-key-a');
/** The cap these tests ask for: long beside a test's steps, short beside an extend's ask. */
const HOLD_MS = 4_000;
const LONG_TTL_MS = 30_000;
/** A wall clock this far ahead of the granting server's is past every cap these tests set. */
const AHEAD_MS = 60_000;

/**
 * The etcd side of caps on holding (etcd-hold-cap.ts): the cap is the granting server's
 * wall-clock time in the lock key's value, and every write that moves the key to a new lease
 * clamps by it on the acting server's clock. Each test acts through a second backend (another
 * dlm server, nothing shared in memory), so the cap can only come from etcd; a backend whose
 * wall clock runs ahead stands for one acting after the cap, without waiting for it.
 */
describe.skipIf(!run)('etcd hold cap', () => {
  const scope = useEtcd(prefix);

  /** A second dlm server whose wall clock reads `aheadMs` later than this one's. */
  const server = (aheadMs = 0): LockBackend =>
    scope.open(aheadMs ? { wallClock: () => Date.now() + aheadMs } : {});

  async function cappedGrant(backend: LockBackend, name: string) {
    const result = await backend.tryAcquire({
      name,
      owner: 'a',
      ttlMs: 2_000,
      keyHash,
      maxHoldMs: HOLD_MS,
    });
    if (!result.granted) throw new Error('expected a grant');
    return result.grant;
  }

  /** A waiter nobody wakes: each test drives its driver's steps itself. */
  const idle = { changed: () => {} };

  /** The cap in the lock key's value: `\x1f<capAtMs> <maxHoldMs>\x1f` before the owner. */
  async function capOf(name: string): Promise<{ capAtMs: number; maxHoldMs: number }> {
    const [capAtMs, maxHoldMs] = ((await lockKv(name))!.value.toString().split('\x1f')[1] ?? '')
      .split(' ')
      .map(Number);
    return { capAtMs: capAtMs!, maxHoldMs: maxHoldMs! };
  }

  const lockKv = async (name: string) =>
    (await scope.raw().get(`${prefix}lock/${name}`).exec()).kvs[0];

  /** The TTL etcd granted the lease the lock key is on, in seconds. */
  async function leaseSeconds(name: string): Promise<number> {
    const kv = await lockKv(name);
    const lease = await scope.raw().leaseClient.leaseTimeToLive({ ID: kv!.lease });
    return Number(lease.grantedTTL);
  }

  it('a fresh grant keeps its cap in the lock key, reports a TTL within it, and releases as before', async () => {
    const backend = server();
    const name = lockName('fresh');
    const before = Date.now();
    const grant = await cappedGrant(backend, name);
    expect(grant.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    const { capAtMs, maxHoldMs } = await capOf(name);
    expect(Number(maxHoldMs)).toBe(HOLD_MS);
    expect(Number(capAtMs)).toBeGreaterThanOrEqual(before + HOLD_MS);
    expect(Number(capAtMs)).toBeLessThanOrEqual(Date.now() + HOLD_MS);
    expect((await backend.inspect(name))?.owner).toBe('a');
    expect(await backend.release({ name, token: grant.token, keyHash })).toBe(true);
    expect(await lockKv(name)).toBeUndefined();
  });

  it('an extend through another server is clamped to the cap: its lease and its reported TTL', async () => {
    const name = lockName('extend');
    const grant = await cappedGrant(server(), name);
    const valueBefore = (await lockKv(name))!.value;
    const extended = await server().extend({
      name,
      token: grant.token,
      keyHash,
      ttlMs: LONG_TTL_MS,
    });
    expect(extended?.token).toBe(grant.token);
    expect(extended?.owner).toBe('a');
    expect(extended!.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    expect(extended!.holdRemainingMs).toBeGreaterThan(0);
    expect(extended!.holdRemainingMs).toBeLessThanOrEqual(HOLD_MS);
    // The lease itself, not only the answer: whole seconds, up to the cap.
    expect(await leaseSeconds(name)).toBeLessThanOrEqual(HOLD_MS / 1_000);
    // The rewrite kept the cap.
    expect((await lockKv(name))!.value.equals(valueBefore)).toBe(true);
  });

  it('a token-only extend is clamped too, and one of an uncapped lease is not', async () => {
    const backend = server();
    const name = lockName('token-only');
    const grant = await cappedGrant(backend, name);
    const extended = await server().extend({ name, token: grant.token, ttlMs: LONG_TTL_MS });
    expect(extended!.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    expect(await leaseSeconds(name)).toBeLessThanOrEqual(HOLD_MS / 1_000);
    const free = lockName('token-only-free');
    const plain = await backend.tryAcquire({ name: free, owner: 'a', ttlMs: 2_000, keyHash });
    if (!plain.granted) throw new Error('expected a grant');
    const long = await server().extend({
      name: free,
      token: plain.grant.token,
      ttlMs: LONG_TTL_MS,
    });
    expect(long?.ttlMs).toBe(LONG_TTL_MS);
    expect(long?.holdRemainingMs).toBeUndefined();
  });

  it('an extend at or past the cap (on the extending server’s clock) ends the lease and answers null', async () => {
    const name = lockName('past');
    const grant = await cappedGrant(server(), name);
    const late = server(AHEAD_MS);
    expect(await late.extend({ name, token: grant.token, keyHash, ttlMs: 2_000 })).toBeNull();
    expect(await lockKv(name)).toBeUndefined();
    const next = await server().tryAcquire({ name, owner: 'b', ttlMs: 2_000 });
    expect(next.granted && next.grant.token).toBeGreaterThan(grant.token);
  });

  it('a lease ended at its cap keeps its lock-delay, from then', async () => {
    const name = lockName('past-delay');
    const granted = await server().tryAcquire({
      name,
      owner: 'a',
      ttlMs: 2_000,
      keyHash,
      maxHoldMs: HOLD_MS,
      lockDelayMs: 3_000,
    });
    if (!granted.granted) throw new Error('expected a grant');
    const late = server(AHEAD_MS);
    expect(
      await late.extend({ name, token: granted.grant.token, keyHash, ttlMs: 2_000 }),
    ).toBeNull();
    expect(await late.lockDelayOf?.(name)).toBeGreaterThan(0);
    // Moved to a lease of the delay alone (it was the lock lease's TTL plus the delay).
    const delay = (await scope.raw().get(`${prefix}delay/${name}`).exec()).kvs[0];
    const lease = await scope.raw().leaseClient.leaseTimeToLive({ ID: delay!.lease });
    expect(Number(lease.grantedTTL)).toBe(3);
  });

  it('an idempotent re-acquire through another server keeps the first grant’s cap', async () => {
    const name = lockName('reacquire');
    const grant = await cappedGrant(server(), name);
    const valueBefore = (await lockKv(name))!.value;
    for (const maxHoldMs of [60_000, undefined]) {
      const again = await server().tryAcquire({
        name,
        owner: 'a',
        ttlMs: LONG_TTL_MS,
        keyHash,
        ...(maxHoldMs === undefined ? {} : { maxHoldMs }),
      });
      if (!again.granted) throw new Error('expected the same lease back');
      expect(again.grant.token).toBe(grant.token);
      expect(again.grant.ttlMs).toBeLessThanOrEqual(HOLD_MS);
      expect(again.grant.holdRemainingMs).toBeLessThanOrEqual(HOLD_MS);
      expect(await leaseSeconds(name)).toBeLessThanOrEqual(HOLD_MS / 1_000);
      expect((await lockKv(name))!.value.equals(valueBefore)).toBe(true);
    }
  });

  it('a re-acquire past the cap ends the capped lease and grants afresh', async () => {
    const name = lockName('reacquire-past');
    const grant = await cappedGrant(server(), name);
    const again = await server(AHEAD_MS).tryAcquire({
      name,
      owner: 'a',
      ttlMs: 2_000,
      keyHash,
      maxHoldMs: HOLD_MS,
    });
    if (!again.granted) throw new Error('expected a fresh grant');
    expect(again.grant.token).toBeGreaterThan(grant.token);
  });

  it('a waiter’s join that takes a free lock writes its cap', async () => {
    const name = lockName('queue-join');
    const before = Date.now();
    const request = { name, owner: 'a', ttlMs: 2_000, keyHash, maxHoldMs: HOLD_MS };
    const step = await server().queue!.driver(request, idle).join();
    if (step.kind !== 'granted') throw new Error(`expected a grant, got ${step.kind}`);
    expect(step.grant.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    const { capAtMs, maxHoldMs } = await capOf(name);
    expect(maxHoldMs).toBe(HOLD_MS);
    expect(capAtMs).toBeGreaterThanOrEqual(before + HOLD_MS);
  });

  it('a waiter’s join finds its own capped lease and refreshes it up to the cap (the queue’s refresh)', async () => {
    const name = lockName('queue-refresh');
    const grant = await cappedGrant(server(), name);
    const valueBefore = (await lockKv(name))!.value;
    const request = { name, owner: 'a', ttlMs: LONG_TTL_MS, keyHash, maxHoldMs: 60_000 };
    const step: QueueStep = await server().queue!.driver(request, idle).join();
    if (step.kind !== 'granted') throw new Error(`expected a grant, got ${step.kind}`);
    expect(step.grant.token).toBe(grant.token);
    expect(step.grant.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    expect(step.grant.holdRemainingMs).toBeLessThanOrEqual(HOLD_MS);
    expect(await leaseSeconds(name)).toBeLessThanOrEqual(HOLD_MS / 1_000);
    expect((await lockKv(name))!.value.equals(valueBefore)).toBe(true);
    // Past the cap, the same join ends that lease instead and looks again.
    const late = await server(AHEAD_MS).queue!.driver(request, idle).join();
    expect(late.kind).toBe('again');
    expect(await lockKv(name)).toBeUndefined();
  });

  it('a waiter granted after a release keeps its cap, counted from its grant, and another server clamps by it', async () => {
    const holder = server();
    const name = lockName('queue-grant');
    const first = await holder.tryAcquire({ name, owner: 'h', ttlMs: 10_000 });
    if (!first.granted) throw new Error('expected a grant');
    const service = createLockService({ backend: server() });
    const waiting = service.acquire({
      name,
      owner: 'w',
      ttlMs: 2_000,
      waitMs: 20_000,
      maxHoldMs: HOLD_MS,
    });
    // Held well past a join: a cap counted from the join would show HOLD_MS - 3 s at most.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    await holder.release({ name, token: first.grant.token });
    const lease = await waiting;
    const grantedAt = Date.now();
    const { capAtMs } = await capOf(name);
    // 2 s for the grant's reply to reach this line on a loaded machine.
    expect(capAtMs).toBeGreaterThan(grantedAt + HOLD_MS - 2_000);
    expect(capAtMs).toBeLessThanOrEqual(grantedAt + HOLD_MS);
    const extended = await server().extend({
      name,
      token: lease.token,
      keyHash: hashLeaseKey(lease.leaseKey),
      ttlMs: LONG_TTL_MS,
    });
    expect(extended!.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    await service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
  });
});
