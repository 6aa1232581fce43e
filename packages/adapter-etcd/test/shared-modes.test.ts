import { pendingAfter, sleep, until } from '@dlm/conformance';
import {
  type AcquireRequest,
  type AcquireResult,
  createLockService,
  type Grant,
  type LockBackend,
  type LockEvent,
} from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import { lockNames, useEtcd, waiterKeys } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-shared');
const prefix = 'shared-test/';

/** A key hash as core makes them: a fixed-length digest, one per lease key. */
const hashOf = (label: string) => label.padEnd(64, '0').slice(0, 64);

describe.skipIf(!run)('etcd shared modes (read locks, semaphores)', () => {
  const { raw, open } = useEtcd(prefix);
  let a: LockBackend;
  let b: LockBackend;
  const shared = (name: string, owner: string, limit: number, ttlMs = 10_000): AcquireRequest => ({
    name,
    owner,
    ttlMs,
    keyHash: hashOf(owner),
    mode: 'shared',
    limit,
  });
  const exclusive = (name: string, owner: string, ttlMs = 10_000): AcquireRequest => ({
    name,
    owner,
    ttlMs,
    keyHash: hashOf(owner),
  });
  const grantOf = (result: AcquireResult): Grant => {
    if (!result.granted) throw new Error(`expected a grant, got ${JSON.stringify(result)}`);
    return result.grant;
  };
  const queueKeys = (name: string) => waiterKeys(raw(), prefix, name);
  const untilQueued = (name: string, count: number) =>
    until(async () => (await queueKeys(name)).length >= count, {
      what: `${count} waiters in ${name}`,
    });
  const queued = (backend: LockBackend, request: AcquireRequest, signal?: AbortSignal) =>
    backend.acquireQueued!({ ...request, signal: signal ?? new AbortController().signal });

  beforeAll(() => {
    a = open();
    b = open();
  });

  it('declares shared modes', () => {
    expect(a.capabilities.sharedModes).toBe(true);
  });

  it('grants shared holders up to the limit, and no exclusive holder beside them', async () => {
    const name = lockName('limit');
    const first = grantOf(await a.tryAcquire(shared(name, 'r1', 2)));
    const second = grantOf(await b.tryAcquire(shared(name, 'r2', 2, 3_000)));
    expect(second.token).toBeGreaterThan(first.token);
    const third = await a.tryAcquire(shared(name, 'r3', 2));
    expect(third.granted).toBe(false);
    // At the limit: the end of the oldest holder would let it in.
    expect(!third.granted && third.ttlRemainingMs).toBeGreaterThan(5_000);
    expect((await b.tryAcquire(exclusive(name, 'w'))).granted).toBe(false);
    const state = await a.inspect(name);
    expect(state).toMatchObject({
      name,
      mode: 'shared',
      limit: 2,
      owner: 'r2',
      token: second.token,
    });
    expect(state?.ttlRemainingMs).toBeLessThanOrEqual(3_000);
    expect(state?.holders?.map((h) => [h.owner, h.token])).toEqual([
      ['r1', first.token],
      ['r2', second.token],
    ]);
  });

  it('an exclusive holder keeps shared requests out, and the other way round', async () => {
    const name = lockName('exclusive');
    const w = grantOf(await a.tryAcquire(exclusive(name, 'w')));
    const refused = await b.tryAcquire(shared(name, 'r', 5));
    expect(refused.granted).toBe(false);
    expect(!refused.granted && refused.ttlRemainingMs).toBeGreaterThan(5_000);
    expect(await a.release({ name, token: w.token, keyHash: hashOf('w') })).toBe(true);
    const r = grantOf(await b.tryAcquire(shared(name, 'r', 5)));
    expect(r.token).toBeGreaterThan(w.token);
    expect((await a.tryAcquire(exclusive(name, 'w2'))).granted).toBe(false);
    expect(await a.inspect(name)).toMatchObject({ mode: 'shared', owner: 'r' });
  });

  it('answers conflicts: the same owner and key in the other mode, or another limit', async () => {
    const name = lockName('conflicts');
    grantOf(await a.tryAcquire(shared(name, 'r', 3)));
    expect(await b.tryAcquire(shared(name, 'other', 4))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    expect(await b.tryAcquire(shared(name, 'r', 4))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    expect(await b.tryAcquire(exclusive(name, 'r'))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    // Another requester in exclusive mode is only refused, not in conflict.
    expect(await b.tryAcquire(exclusive(name, 'w'))).toEqual({ granted: false });

    const other = lockName('conflicts-x');
    grantOf(await a.tryAcquire(exclusive(other, 'w')));
    expect(await b.tryAcquire(shared(other, 'w', 2))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
  });

  it('a re-acquire by the same owner and key refreshes that holder only (same token)', async () => {
    const name = lockName('refresh');
    const first = grantOf(await a.tryAcquire(shared(name, 'r1', 2, 2_000)));
    const other = grantOf(await a.tryAcquire(shared(name, 'r2', 2)));
    const again = grantOf(await b.tryAcquire(shared(name, 'r1', 2, 8_000)));
    expect(again.token).toBe(first.token);
    expect(again.ttlMs).toBe(8_000);
    const state = await a.inspect(name);
    expect(state?.holders?.map((h) => h.token)).toEqual([first.token, other.token]);
    expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(5_000);
    // The same owner with another key is another requester: the limit is reached.
    const stranger = await a.tryAcquire({ ...shared(name, 'r1', 2), keyHash: hashOf('zz') });
    expect(stranger.granted).toBe(false);
  });

  it('release and extend by token and key hash touch that holder only', async () => {
    const name = lockName('per-holder');
    const r1 = grantOf(await a.tryAcquire(shared(name, 'r1', 3)));
    const r2 = grantOf(await a.tryAcquire(shared(name, 'r2', 3)));
    const r3 = grantOf(await a.tryAcquire(shared(name, 'r3', 3)));
    // Wrong key hash, or another holder's token: nothing happens.
    expect(await b.release({ name, token: r1.token, keyHash: hashOf('r2') })).toBe(false);
    expect(await b.release({ name, token: r2.token, keyHash: hashOf('r1') })).toBe(false);
    expect(
      await b.extend({ name, token: r1.token + 100n, ttlMs: 5_000, keyHash: hashOf('r1') }),
    ).toBeNull();
    expect(await b.release({ name, token: r1.token, keyHash: hashOf('r1') })).toBe(true);
    expect(await b.release({ name, token: r1.token, keyHash: hashOf('r1') })).toBe(false);
    const extended = await b.extend({
      name,
      token: r2.token,
      ttlMs: 20_000,
      keyHash: hashOf('r2'),
    });
    expect(extended).toEqual({ name, owner: 'r2', token: r2.token, ttlMs: 20_000 });
    const state = await a.inspect(name);
    expect(state?.holders?.map((h) => h.owner)).toEqual(['r2', 'r3']);
    expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(10_000);
    expect(state?.holders?.[1]?.ttlRemainingMs).toBeLessThanOrEqual(10_000);
    // An operator's token-only release finds the shared holder by its token.
    expect(await a.release({ name, token: r3.token })).toBe(true);
    expect((await a.inspect(name))?.holders?.map((h) => h.owner)).toEqual(['r2']);
  });

  it('an expiry ends that holder only', async () => {
    const name = lockName('expiry');
    grantOf(await a.tryAcquire(shared(name, 'short', 2, 1_000)));
    const long = grantOf(await a.tryAcquire(shared(name, 'long', 2, 10_000)));
    await until(async () => (await a.inspect(name))?.holders?.length === 1, {
      timeoutMs: 5_000,
      what: 'the short holder to expire',
    });
    expect(await a.inspect(name)).toMatchObject({ owner: 'long', token: long.token });
  });

  it('tokens strictly increase across modes', async () => {
    const name = lockName('tokens');
    let last = 0n;
    const next = (grant: Grant) => {
      expect(grant.token).toBeGreaterThan(last);
      last = grant.token;
      return grant;
    };
    for (let i = 0; i < 3; i += 1) {
      const r1 = next(grantOf(await a.tryAcquire(shared(name, `r${i}a`, 5))));
      const r2 = next(grantOf(await b.tryAcquire(shared(name, `r${i}b`, 5))));
      await a.release({ name, token: r1.token, keyHash: hashOf(`r${i}a`) });
      await b.release({ name, token: r2.token, keyHash: hashOf(`r${i}b`) });
      const w = next(grantOf(await a.tryAcquire(exclusive(name, `w${i}`))));
      await b.release({ name, token: w.token, keyHash: hashOf(`w${i}`) });
    }
  });

  it('concurrent shared try-locks on two backends grant exactly the limit', async () => {
    const name = lockName('race');
    const limit = 3;
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        (i % 2 ? a : b).tryAcquire(shared(name, `c${i}`, limit)),
      ),
    );
    const grants = results.filter((result) => result.granted);
    expect(grants).toHaveLength(limit);
    const state = await a.inspect(name);
    expect(state?.holders).toHaveLength(limit);
    const tokens = grants.map((result) => grantOf(result).token);
    expect(new Set(tokens).size).toBe(limit);
  });

  it('watch: one acquired (with its mode) and one end event per holder; revoke ends them all', async () => {
    const name = lockName('events');
    const events: LockEvent[] = [];
    const stop = b.watch(name, (event) => events.push(event));
    const r1 = grantOf(await a.tryAcquire(shared(name, 'r1', 3)));
    const r2 = grantOf(await a.tryAcquire(shared(name, 'r2', 3)));
    const r3 = grantOf(await a.tryAcquire(shared(name, 'r3', 3, 1_000)));
    await a.release({ name, token: r1.token, keyHash: hashOf('r1') });
    await until(() => events.some((event) => event.type === 'expired'), {
      timeoutMs: 5_000,
      what: 'the expiry of r3',
    });
    expect(await a.revoke!(name)).toBe(true);
    expect(await a.inspect(name)).toBeNull();
    expect(await a.revoke!(name)).toBe(false);
    await until(() => events.length >= 6, { what: 'six events' });
    await sleep(100);
    stop();
    const pick = ({ type, token, owner, mode }: LockEvent) => ({ type, token, owner, mode });
    expect(events.map(pick)).toEqual([
      { type: 'acquired', token: r1.token, owner: 'r1', mode: 'shared' },
      { type: 'acquired', token: r2.token, owner: 'r2', mode: 'shared' },
      { type: 'acquired', token: r3.token, owner: 'r3', mode: 'shared' },
      { type: 'released', token: r1.token, owner: 'r1', mode: 'shared' },
      { type: 'expired', token: r3.token, owner: 'r3', mode: 'shared' },
      { type: 'revoked', token: r2.token, owner: 'r2', mode: 'shared' },
    ]);
  });

  it('list reports shared holders beside exclusive locks', async () => {
    const base = lockName('list');
    grantOf(await a.tryAcquire(exclusive(`${base}/x`, 'w')));
    const r1 = grantOf(await a.tryAcquire(shared(`${base}/s`, 'r1', 4)));
    const r2 = grantOf(await a.tryAcquire(shared(`${base}/s`, 'r2', 4)));
    const listed = await a.list!(`${base}/`);
    expect(listed.map((state) => state.name)).toEqual([`${base}/s`, `${base}/x`]);
    expect(listed[0]).toMatchObject({ mode: 'shared', limit: 4, owner: 'r2', token: r2.token });
    expect(listed[0]?.holders?.map((h) => h.token)).toEqual([r1.token, r2.token]);
  });

  it('a shared try-lock does not pass a queued exclusive waiter (no writer starvation)', async () => {
    const name = lockName('no-starvation');
    const r = grantOf(await a.tryAcquire(shared(name, 'r', 10)));
    const writer = queued(b, exclusive(name, 'w'));
    await untilQueued(name, 1);
    expect((await a.tryAcquire(shared(name, 'late', 10))).granted).toBe(false);
    await a.release({ name, token: r.token, keyHash: hashOf('r') });
    const w = grantOf(await writer);
    expect(w.token).toBeGreaterThan(r.token);
  });

  it('a shared try-lock is granted exactly when a queued request would be at once', async () => {
    const name = lockName('try-vs-queue');
    // Queue entries put by hand: a shared waiter (its id is `s<limit>.<random>`) that has not
    // looked yet.
    const sharedEntry = `${prefix}queue/${name}\0s3.fake`;
    const otherLimitEntry = `${prefix}queue/${name}\0s4.fake`;
    const exclusiveEntry = `${prefix}queue/${name}\0abcd`;
    await raw().put(sharedEntry).value('waiter');
    grantOf(await a.tryAcquire(shared(name, 'r1', 3)));
    // One holder and one shared waiter ahead: room for one more (limit 3).
    grantOf(await a.tryAcquire(shared(name, 'r2', 3)));
    // Now the waiter ahead takes the last permit: no room.
    expect((await a.tryAcquire(shared(name, 'r3', 3))).granted).toBe(false);
    await raw().delete().key(sharedEntry);
    // A shared waiter with another limit goes first (it will be refused or granted alone).
    await raw().put(otherLimitEntry).value('waiter');
    expect((await a.tryAcquire(shared(name, 'r3', 3))).granted).toBe(false);
    await raw().delete().key(otherLimitEntry);
    await raw().put(exclusiveEntry).value('writer');
    // Room, but an exclusive waiter is queued: refused.
    expect((await a.tryAcquire(shared(name, 'r3', 3))).granted).toBe(false);
    await raw().delete().key(exclusiveEntry);
    grantOf(await a.tryAcquire(shared(name, 'r3', 3)));
  });

  it('the queue is FIFO across modes and backends: S,S,X,S', async () => {
    const name = lockName('fifo');
    const h = grantOf(await a.tryAcquire(exclusive(name, 'h')));
    const s1 = queued(a, shared(name, 's1', 5));
    await untilQueued(name, 1);
    const s2 = queued(b, shared(name, 's2', 5));
    await untilQueued(name, 2);
    const x = queued(a, exclusive(name, 'x'));
    await untilQueued(name, 3);
    const s3 = queued(b, shared(name, 's3', 5));
    await untilQueued(name, 4);
    await a.release({ name, token: h.token, keyHash: hashOf('h') });
    // Both shared waiters at the head are granted together.
    const [g1, g2] = [grantOf(await s1), grantOf(await s2)];
    expect(await pendingAfter(x, 300)).toBe(true);
    expect(await pendingAfter(s3, 0)).toBe(true);
    await a.release({ name, token: g1.token, keyHash: hashOf('s1') });
    expect(await pendingAfter(x, 300)).toBe(true);
    const released = performance.now();
    await b.release({ name, token: g2.token, keyHash: hashOf('s2') });
    const gx = grantOf(await x);
    expect(performance.now() - released).toBeLessThan(1_500);
    expect(gx.token).toBeGreaterThan(g2.token);
    // The last shared waiter waited behind the exclusive one, and now waits for it.
    expect(await pendingAfter(s3, 300)).toBe(true);
    await a.release({ name, token: gx.token, keyHash: hashOf('x') });
    const g3 = grantOf(await s3);
    expect(g3.token).toBeGreaterThan(gx.token);
    expect(await queueKeys(name)).toEqual([]);
  });

  it('a queued shared waiter behind one with another limit waits for it, then is refused', async () => {
    const name = lockName('queued-limits');
    const h = grantOf(await a.tryAcquire(exclusive(name, 'h')));
    const two = queued(a, shared(name, 'two', 2));
    await untilQueued(name, 1);
    const three = queued(b, shared(name, 'three', 3));
    await untilQueued(name, 2);
    await a.release({ name, token: h.token, keyHash: hashOf('h') });
    const granted = grantOf(await two);
    expect(await three).toEqual({ granted: false, conflict: { field: 'limit', limit: 2 } });
    const state = await a.inspect(name);
    expect(state?.holders?.map((holder) => holder.token)).toEqual([granted.token]);
    expect(state?.limit).toBe(2);
  });

  it('a semaphore at its limit admits the next waiter on a release, and on an expiry', async () => {
    const name = lockName('semaphore');
    const p1 = grantOf(await a.tryAcquire(shared(name, 'p1', 2, 10_000)));
    grantOf(await a.tryAcquire(shared(name, 'p2', 2, 2_000)));
    const onRelease = queued(b, shared(name, 'w1', 2));
    await untilQueued(name, 1);
    const onExpiry = queued(a, shared(name, 'w2', 2));
    await untilQueued(name, 2);
    expect(await pendingAfter(onRelease, 200)).toBe(true);
    let released = performance.now();
    await a.release({ name, token: p1.token, keyHash: hashOf('p1') });
    grantOf(await onRelease);
    expect(performance.now() - released).toBeLessThan(1_000);
    // p2's lease (2 s) runs out; w2 gets its permit at the expiry, not a poll later.
    released = performance.now();
    grantOf(await onExpiry);
    expect(performance.now() - released).toBeLessThan(3_500);
    const state = await a.inspect(name);
    expect(state?.holders?.map((h) => h.owner)).toEqual(['w1', 'w2']);
  });

  it("a queued writer is granted at the last reader's expiry", async () => {
    const name = lockName('writer-expiry');
    grantOf(await a.tryAcquire(shared(name, 'r1', 5, 1_000)));
    const r2 = grantOf(await b.tryAcquire(shared(name, 'r2', 5, 2_000)));
    const startedAt = performance.now();
    const w = grantOf(await queued(b, exclusive(name, 'w')));
    const waitedMs = performance.now() - startedAt;
    // Not before the longer reader's lease (2 s) ran out, and soon after it.
    expect(waitedMs).toBeGreaterThan(1_000);
    expect(waitedMs).toBeLessThan(3_500);
    expect(w.token).toBeGreaterThan(r2.token);
    expect(await a.inspect(name)).toMatchObject({ owner: 'w', token: w.token });
  });

  it('acquireQueued answers conflicts and leaves no queue key', async () => {
    const name = lockName('queued-conflict');
    grantOf(await a.tryAcquire(shared(name, 'r', 2)));
    grantOf(await a.tryAcquire(shared(name, 'r2', 2)));
    expect(await queued(b, shared(name, 'x', 3))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 2 },
    });
    expect(await queued(b, exclusive(name, 'r'))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    // Queued behind the full semaphore, then finding the other limit at its look.
    const other = lockName('queued-conflict-x');
    grantOf(await a.tryAcquire(exclusive(other, 'w')));
    expect(await queued(b, shared(other, 'w', 2))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    expect(await queueKeys(name)).toEqual([]);
    expect(await queueKeys(other)).toEqual([]);
  });

  it('a queued shared waiter that gives up leaves the queue', async () => {
    const name = lockName('abort');
    grantOf(await a.tryAcquire(exclusive(name, 'w')));
    const controller = new AbortController();
    const waiting = queued(b, shared(name, 'r', 2), controller.signal);
    await untilQueued(name, 1);
    controller.abort();
    expect((await waiting).granted).toBe(false);
    expect(await queueKeys(name)).toEqual([]);
  });

  it('through the lock service: readers together, a writer after them, get() with holders', async () => {
    const name = lockName('service');
    const [one, two] = [createLockService({ backend: a }), createLockService({ backend: b })];
    try {
      const r1 = await one.acquire({ name, owner: 'r1', ttlMs: 10_000, mode: 'shared' });
      const r2 = await two.acquire({ name, owner: 'r2', ttlMs: 10_000, mode: 'shared' });
      expect([r1.mode, r2.mode]).toEqual(['shared', 'shared']);
      const writer = one.acquire({ name, owner: 'w', ttlMs: 10_000, waitMs: 10_000 });
      await untilQueued(name, 1);
      const state = await two.get(name);
      expect(state?.mode).toBe('shared');
      expect(state?.holders?.map((h) => h.owner)).toEqual(['r1', 'r2']);
      expect(state?.token).toBe(r2.token);
      await one.release({ name, token: r1.token, leaseKey: r1.leaseKey });
      expect(await pendingAfter(writer, 300)).toBe(true);
      await two.release({ name, token: r2.token, leaseKey: r2.leaseKey });
      const w = await writer;
      expect(w.token).toBeGreaterThan(r2.token);
      expect((await one.get(name))?.mode).toBe('exclusive');
    } finally {
      await one.close();
      await two.close();
    }
  });
});
