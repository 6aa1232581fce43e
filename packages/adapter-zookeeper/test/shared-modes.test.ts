import { lockName, pendingAfter, sleep, until } from '@dlm/conformance';
import type { AcquireRequest, AcquireResult, Grant, LockBackend, LockEvent } from '@dlm/core';
import { zookeeperAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import { zookeeperBackend } from '../src/index.js';
import { lockPaths } from '../src/zk-paths.js';
import { lastZxid, useZooKeeper, waiterNodes } from './support.js';

const run = zookeeperAvailable();
const prefix = '/dlm-shared-test';
const paths = lockPaths(prefix);

type Mode = Pick<AcquireRequest, 'mode' | 'limit'>;
const shared = (limit: number): Mode => ({ mode: 'shared', limit });
const exclusive: Mode = {};

describe.skipIf(!run)('zookeeper shared modes (read locks, semaphores)', () => {
  const { zk, raw, open } = useZooKeeper(prefix);
  let a: LockBackend;
  let b: LockBackend;
  const attempt = (
    backend: LockBackend,
    name: string,
    owner: string,
    mode: Mode,
    ttlMs = 10_000,
    keyHash?: string,
  ): Promise<AcquireResult> => backend.tryAcquire({ name, owner, ttlMs, keyHash, ...mode });
  const take = async (...args: Parameters<typeof attempt>): Promise<Grant> => {
    const result = await attempt(...args);
    if (!result.granted) throw new Error(`expected ${args[2]} to be granted ${args[1]}`);
    return result.grant;
  };
  const queued = (
    backend: LockBackend,
    name: string,
    owner: string,
    mode: Mode,
    ttlMs = 10_000,
  ) => {
    const controller = new AbortController();
    const result = backend.acquireQueued!({
      name,
      owner,
      ttlMs,
      signal: controller.signal,
      ...mode,
    });
    return { result, abort: () => controller.abort() };
  };
  const grantOf = async (promise: Promise<AcquireResult>): Promise<Grant> => {
    const result = await promise;
    if (!result.granted) throw new Error('expected a grant');
    return result.grant;
  };
  /** The waiter nodes of `name`'s queue (a look of the test's own at what the adapter wrote). */
  const waiterCount = async (name: string) => (await waiterNodes(raw(), paths.parent(name))).length;
  const untilQueued = (name: string, count: number) =>
    until(async () => (await waiterCount(name)) >= count, {
      timeoutMs: 10_000,
      what: `${count} waiters queued on ${name}`,
    });
  /** Every event `b`'s watch of `name` sees, from once the watch is set. */
  const watchOnB = async (name: string) => {
    const events: LockEvent[] = [];
    const stop = b.watch(name, (event) => events.push(event));
    await sleep(100);
    return { events, stop };
  };

  beforeAll(() => {
    a = open();
    b = open();
  });

  it('declares shared modes', () => {
    expect(a.capabilities.sharedModes).toBe(true);
  });

  it('grants shared holders up to the limit across backends, then refuses with the soonest end', async () => {
    const name = lockName('limit');
    const first = await take(a, name, 'r1', shared(3), 2_000);
    const second = await take(b, name, 'r2', shared(3), 8_000);
    const third = await take(a, name, 'r3', shared(3), 9_000);
    expect(second.token).toBeGreaterThan(first.token);
    expect(third.token).toBeGreaterThan(second.token);
    const full = await attempt(b, name, 'r4', shared(3));
    expect(full.granted).toBe(false);
    if (!full.granted) {
      expect(full.conflict).toBeUndefined();
      // The soonest end (r1's 2 s lease) is what would let r4 in.
      expect(full.ttlRemainingMs).toBeGreaterThan(0);
      expect(full.ttlRemainingMs).toBeLessThanOrEqual(2_000);
    }
    const writer = await attempt(b, name, 'w', exclusive);
    expect(writer.granted).toBe(false);
    // An exclusive request waits for the latest end (r3's 9 s lease).
    if (!writer.granted) expect(writer.ttlRemainingMs).toBeGreaterThan(8_000);
  });

  it('an exclusive holder admits nobody beside it, and a shared holder no exclusive one', async () => {
    const name = lockName('exclusive');
    const writer = await take(a, name, 'w', exclusive, 3_000);
    const reader = await attempt(b, name, 'r', shared(5));
    expect(reader.granted).toBe(false);
    if (!reader.granted) {
      expect(reader.conflict).toBeUndefined();
      expect(reader.ttlRemainingMs).toBeLessThanOrEqual(3_000);
    }
    expect(await a.release({ name, token: writer.token })).toBe(true);
    const r = await take(b, name, 'r', shared(5));
    expect(r.token).toBeGreaterThan(writer.token);
    expect((await attempt(a, name, 'w2', exclusive)).granted).toBe(false);
  });

  it('answers conflicts: another limit, the same owner and key in the other mode', async () => {
    const name = lockName('conflict');
    await take(a, name, 'r1', shared(3), 10_000, 'key-1');
    expect(await attempt(b, name, 'r2', shared(4))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    expect(await attempt(b, name, 'r1', exclusive, 10_000, 'key-1')).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    const other = lockName('conflict-x');
    await take(a, other, 'w', exclusive, 10_000, 'key-w');
    expect(await attempt(b, other, 'w', shared(2), 10_000, 'key-w')).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    // The same owner with another key is another requester: held, no conflict.
    const stranger = await attempt(b, other, 'w', shared(2), 10_000, 'key-other');
    expect(stranger.granted).toBe(false);
    if (!stranger.granted) expect(stranger.conflict).toBeUndefined();
  });

  it('the same owner and key in the same mode and limit refreshes that holder (same token)', async () => {
    const name = lockName('refresh');
    const first = await take(a, name, 'r1', shared(2), 1_000, 'k1');
    const other = await take(a, name, 'r2', shared(2), 10_000, 'k2');
    const again = await take(b, name, 'r1', shared(2), 10_000, 'k1');
    expect(again.token).toBe(first.token);
    const state = await b.inspect(name);
    expect(state?.holders).toHaveLength(2);
    expect(state?.holders?.[0]).toMatchObject({ owner: 'r1', token: first.token });
    // Refreshed to 10 s: well past the first 1 s lease.
    expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(5_000);
    expect(state?.holders?.[1]?.token).toBe(other.token);
  });

  it('release and extend by token touch that holder only; a wrong key hash is refused', async () => {
    const name = lockName('per-holder');
    const r1 = await take(a, name, 'r1', shared(3), 5_000, 'k1');
    const r2 = await take(b, name, 'r2', shared(3), 5_000, 'k2');
    expect(await b.release({ name, token: r1.token, keyHash: 'wrong' })).toBe(false);
    expect(await a.extend({ name, token: r2.token, keyHash: 'wrong', ttlMs: 20_000 })).toBeNull();
    // Extended through the other backend than the one that granted it.
    expect((await a.extend({ name, token: r2.token, keyHash: 'k2', ttlMs: 20_000 }))?.token).toBe(
      r2.token,
    );
    expect(await b.release({ name, token: r1.token, keyHash: 'k1' })).toBe(true);
    expect(await b.release({ name, token: r1.token, keyHash: 'k1' })).toBe(false);
    const state = await a.inspect(name);
    expect(state).toMatchObject({ owner: 'r2', token: r2.token, mode: 'shared', limit: 3 });
    expect(state?.holders?.map((holder) => holder.token)).toEqual([r2.token]);
    expect(state?.ttlRemainingMs).toBeGreaterThan(15_000);
  });

  it('inspect lists every holder by token with its own lease; the top level is the newest', async () => {
    const name = lockName('inspect');
    const r1 = await take(a, name, 'r1', shared(3), 9_000);
    const r2 = await take(b, name, 'r2', shared(3), 3_000);
    const state = await a.inspect(name);
    expect(state).toMatchObject({
      name,
      owner: 'r2',
      token: r2.token,
      mode: 'shared',
      limit: 3,
    });
    expect(state?.holders?.map(({ owner, token }) => ({ owner, token }))).toEqual([
      { owner: 'r1', token: r1.token },
      { owner: 'r2', token: r2.token },
    ]);
    expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(6_000);
    expect(state?.holders?.[1]?.ttlRemainingMs).toBeLessThanOrEqual(3_000);
    expect((await b.list!(name)).map((listed) => listed.holders?.length)).toEqual([2]);
  });

  it('an expiry ends that holder only, and frees its room', async () => {
    const name = lockName('expiry');
    const short = await take(a, name, 'short', shared(2), 300);
    const long = await take(b, name, 'long', shared(2), 10_000);
    expect((await attempt(b, name, 'late', shared(2))).granted).toBe(false);
    await sleep(400);
    const state = await a.inspect(name);
    expect(state?.holders?.map((holder) => holder.token)).toEqual([long.token]);
    expect(await a.extend({ name, token: short.token, ttlMs: 5_000 })).toBeNull();
    const late = await take(b, name, 'late', shared(2));
    expect(late.token).toBeGreaterThan(long.token);
    expect((await b.inspect(name))?.holders?.map((holder) => holder.owner)).toEqual([
      'long',
      'late',
    ]);
  });

  it('revoke ends every holder in one step, with one revoked event for each', async () => {
    const name = lockName('revoke');
    const { events, stop } = await watchOnB(name);
    const r1 = await take(a, name, 'r1', shared(3));
    const r2 = await take(a, name, 'r2', shared(3));
    await until(() => events.filter((event) => event.type === 'acquired').length >= 2, 5_000);
    // Revoked through the other backend than the watching one: the watch learns why from ZooKeeper.
    expect(await a.revoke!(name)).toBe(true);
    expect(await a.inspect(name)).toBeNull();
    await until(() => events.filter((event) => event.type === 'revoked').length >= 2, 5_000);
    stop();
    const ends = events.filter((event) => event.type !== 'acquired');
    expect(ends.map(({ type, token }) => ({ type, token }))).toEqual([
      { type: 'revoked', token: r1.token },
      { type: 'revoked', token: r2.token },
    ]);
    expect(await b.revoke!(name)).toBe(false);
  });

  it('tokens strictly increase across modes', async () => {
    const name = lockName('tokens');
    const tokens: bigint[] = [];
    const r1 = await take(a, name, 'r1', shared(2));
    const r2 = await take(b, name, 'r2', shared(2));
    tokens.push(r1.token, r2.token);
    await a.release({ name, token: r1.token });
    await b.release({ name, token: r2.token });
    const w = await take(b, name, 'w', exclusive);
    tokens.push(w.token);
    await b.release({ name, token: w.token });
    const r3 = await take(a, name, 'r3', shared(5));
    tokens.push(r3.token);
    expect([...tokens].sort((x, y) => (x < y ? -1 : 1))).toEqual(tokens);
    expect(new Set(tokens).size).toBe(tokens.length);
  });

  it('one atomic step per grant: 12 concurrent shared try-locks with limit 4 on two backends grant exactly 4', async () => {
    const name = lockName('race');
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => attempt(i % 2 ? a : b, name, `r${i}`, shared(4))),
    );
    const grants = results.filter((result) => result.granted);
    expect(grants).toHaveLength(4);
    expect((await a.inspect(name))?.holders).toHaveLength(4);
    // And an exclusive race beside them grants none.
    const writers = await Promise.all([
      attempt(a, name, 'w1', exclusive),
      attempt(b, name, 'w2', exclusive),
    ]);
    expect(writers.some((result) => result.granted)).toBe(false);
  });

  it("watch: 'acquired' carries the mode, and each holder's end is its own event", async () => {
    const name = lockName('events');
    const { events, stop } = await watchOnB(name);
    const r1 = await take(a, name, 'r1', shared(2));
    const r2 = await take(a, name, 'r2', shared(2));
    await until(() => events.length >= 2, 5_000);
    await a.release({ name, token: r1.token });
    await until(() => events.length >= 3, 5_000);
    await a.release({ name, token: r2.token });
    await until(() => events.length >= 4, 5_000);
    const w = await take(a, name, 'w', exclusive);
    await until(() => events.length >= 5, 5_000);
    stop();
    expect(events.map(({ type, token, owner, mode }) => ({ type, token, owner, mode }))).toEqual([
      { type: 'acquired', token: r1.token, owner: 'r1', mode: 'shared' },
      { type: 'acquired', token: r2.token, owner: 'r2', mode: 'shared' },
      { type: 'released', token: r1.token, owner: 'r1', mode: undefined },
      { type: 'released', token: r2.token, owner: 'r2', mode: undefined },
      { type: 'acquired', token: w.token, owner: 'w', mode: 'exclusive' },
    ]);
  });

  it('one FIFO for both modes across backends: S,S,X,S grants both S together, X after both, the last S after X', async () => {
    const name = lockName('fifo');
    const holder = await take(a, name, 'holder', exclusive);
    const s1 = queued(a, name, 's1', shared(10));
    await untilQueued(name, 1);
    const s2 = queued(b, name, 's2', shared(10));
    await untilQueued(name, 2);
    const x = queued(a, name, 'x', exclusive);
    await untilQueued(name, 3);
    const s3 = queued(b, name, 's3', shared(10));
    await untilQueued(name, 4);
    expect(await pendingAfter(s1.result, 200)).toBe(true);
    await a.release({ name, token: holder.token });
    const [g1, g2] = await Promise.all([grantOf(s1.result), grantOf(s2.result)]);
    expect(g1.token).toBeGreaterThan(holder.token);
    expect((await a.inspect(name))?.holders).toHaveLength(2);
    // The last S has room (limit 10) but waits behind X: no writer starvation.
    expect(await pendingAfter(x.result, 300)).toBe(true);
    expect(await pendingAfter(s3.result, 0)).toBe(true);
    await a.release({ name, token: g1.token });
    expect(await pendingAfter(x.result, 300)).toBe(true);
    await b.release({ name, token: g2.token });
    const gx = await grantOf(x.result);
    expect(gx.token).toBeGreaterThan(g2.token);
    expect(await pendingAfter(s3.result, 300)).toBe(true);
    await a.release({ name, token: gx.token });
    const g3 = await grantOf(s3.result);
    expect(g3.token).toBeGreaterThan(gx.token);
  });

  it('a semaphore at its limit admits the next waiter promptly on a release and at an expiry', async () => {
    const name = lockName('semaphore');
    const p1 = await take(a, name, 'p1', shared(2), 10_000);
    const p2 = await take(b, name, 'p2', shared(2), 1_500);
    const next = queued(b, name, 'next', shared(2));
    // Queued in this order: two acquires sent at once may queue either way round.
    await untilQueued(name, 1);
    const after = queued(a, name, 'after', shared(2));
    await untilQueued(name, 2);
    expect(await pendingAfter(next.result, 200)).toBe(true);
    let started = performance.now();
    await a.release({ name, token: p1.token });
    const n = await grantOf(next.result);
    // Woken by the release's watch, not a poll: well under the remaining leases.
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(n.token).toBeGreaterThan(p2.token);
    started = performance.now();
    const late = await grantOf(after.result);
    // p2's lease ran out (nobody announces it): the waiter looked at its deadline.
    const waited = performance.now() - started;
    expect(waited).toBeLessThan(3_000);
    expect(late.token).toBeGreaterThan(n.token);
    const state = await a.inspect(name);
    expect(state?.holders?.map((holder) => holder.owner)).toEqual(['next', 'after']);
  });

  it("a release hands an exclusive lock to this backend's shared head waiter, and the shared waiter behind joins it", async () => {
    const name = lockName('hand-over');
    const holder = await take(a, name, 'w', exclusive);
    const s1 = queued(a, name, 's1', shared(3));
    await untilQueued(name, 1);
    const s2 = queued(a, name, 's2', shared(3));
    await untilQueued(name, 2);
    expect(await a.release({ name, token: holder.token })).toBe(true);
    const [g1, g2] = await Promise.all([grantOf(s1.result), grantOf(s2.result)]);
    expect(g1.token).toBeGreaterThan(holder.token);
    expect(g2.token).toBeGreaterThan(g1.token);
    expect((await b.inspect(name))?.holders?.map((each) => each.owner)).toEqual(['s1', 's2']);
    expect(await waiterCount(name)).toBe(0);
  });

  it("with ephemeral: true, the shared holders of a closed backend end, each seen 'expired'", async () => {
    const name = lockName('ephemeral');
    const ephemeral = zookeeperBackend({
      connect: zk().connectString,
      prefix,
      sessionTimeoutMs: 2_000,
      ephemeral: true,
    });
    const { events, stop } = await watchOnB(name);
    const r1 = await take(ephemeral, name, 'r1', shared(3));
    const r2 = await take(ephemeral, name, 'r2', shared(3));
    const r3 = await take(b, name, 'r3', shared(3));
    await until(() => events.filter((event) => event.type === 'acquired').length >= 3, 5_000);
    await ephemeral.close();
    await until(() => events.filter((event) => event.type === 'expired').length >= 2, 5_000);
    stop();
    expect(events.filter((event) => event.type === 'expired').map((event) => event.token)).toEqual([
      r1.token,
      r2.token,
    ]);
    expect((await a.inspect(name))?.holders?.map((each) => each.token)).toEqual([r3.token]);
  });

  it("the release of a permit hands its room to this backend's shared head waiter in one write", async () => {
    const name = lockName('permit-hand-over');
    const p1 = await take(a, name, 'p1', shared(2));
    await take(b, name, 'p2', shared(2));
    const next = queued(a, name, 'next', shared(2));
    await untilQueued(name, 1);
    // Asleep behind the holders: its look has answered.
    expect(await pendingAfter(next.result, 200)).toBe(true);
    const before = await lastZxid(raw(), prefix);
    expect(await a.release({ name, token: p1.token })).toBe(true);
    const granted = await grantOf(next.result);
    // The release and the grant are one transaction (a release and the waiter's own grant
    // would be two, and the token one higher).
    expect(granted.token).toBe(before + 1n);
    expect((await b.inspect(name))?.holders?.map((each) => each.owner)).toEqual(['p2', 'next']);
    expect(await waiterCount(name)).toBe(0);
  });

  it('waiters at a full semaphore are admitted one per release, in queue order, across backends', async () => {
    const name = lockName('semaphore-order');
    let permit = await take(a, name, 'p0', shared(1));
    const waits: Array<{ owner: string; wait: ReturnType<typeof queued> }> = [];
    for (const [i, owner] of ['w1', 'w2', 'w3'].entries()) {
      // Queued one after the other, so that their order is known.
      waits.push({ owner, wait: queued(i % 2 ? a : b, name, owner, shared(1)) });
      await untilQueued(name, i + 1);
    }
    for (const { owner, wait } of waits) {
      expect(await pendingAfter(wait.result, 100)).toBe(true);
      const started = performance.now();
      await a.release({ name, token: permit.token });
      const next = await grantOf(wait.result);
      expect(next.owner).toBe(owner);
      expect(next.token).toBeGreaterThan(permit.token);
      expect(performance.now() - started).toBeLessThan(2_000);
      permit = next;
    }
  });

  it('acquireQueued answers a conflict instead of waiting', async () => {
    const name = lockName('queued-conflict');
    await take(a, name, 'r1', shared(3), 10_000, 'k1');
    const other = queued(b, name, 'r2', shared(4));
    expect(await other.result).toEqual({ granted: false, conflict: { field: 'limit', limit: 3 } });
    const mine = b.acquireQueued!({
      name,
      owner: 'r1',
      keyHash: 'k1',
      ttlMs: 5_000,
      signal: new AbortController().signal,
    });
    expect(await mine).toEqual({ granted: false, conflict: { field: 'mode' } });
    expect(await waiterCount(name)).toBe(0);
  });
});
