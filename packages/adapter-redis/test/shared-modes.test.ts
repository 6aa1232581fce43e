import { lockName, until } from '@dlm/conformance';
import type { AcquireRequest, AcquireResult, Grant, LockEvent } from '@dlm/core';
import { redisAvailable } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { nameKeys, type RedisBackend, redisBackend } from '../src/index.js';
import { queueProbe } from './queue-probe.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();

/** Shared holders, semaphores and their queue on one real Redis, through two backends. */
describe.skipIf(!enabled)('redis shared modes', () => {
  const redis = useRedis();
  const opened: RedisBackend[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((backend) => backend.close()));
  });
  const server = async () => {
    const backend = redisBackend({ url: redis().url, waiterTtlMs: 900 });
    opened.push(backend);
    await backend.ready();
    return backend;
  };
  const shared = (name: string, owner: string, limit: number, more: Partial<AcquireRequest> = {}) =>
    ({
      name,
      owner,
      ttlMs: 10_000,
      mode: 'shared',
      limit,
      keyHash: `k-${owner}`,
      ...more,
    }) as const;
  const exclusive = (name: string, owner: string, more: Partial<AcquireRequest> = {}) => ({
    name,
    owner,
    ttlMs: 10_000,
    keyHash: `k-${owner}`,
    ...more,
  });
  const granted = (result: AcquireResult): Grant => {
    if (!result.granted) throw new Error(`expected a grant, got ${JSON.stringify(result)}`);
    return result.grant;
  };
  const rawKeys = async (name: string) => {
    const client = new Redis(redis().url, { maxRetriesPerRequest: 0 });
    try {
      const keys = nameKeys('dlm:', name);
      return await client.keys(`dlm:{${keys.hex}}*`);
    } finally {
      client.disconnect();
    }
  };
  const recorder = (backend: RedisBackend, name: string) => {
    const events: LockEvent[] = [];
    const stop = backend.watch(name, (event) => events.push(event));
    return { events, stop };
  };

  it('declares sharedModes', async () => {
    expect((await server()).capabilities.sharedModes).toBe(true);
  });

  it('grants shared holders up to the limit, with strictly increasing tokens', async () => {
    const backend = await server();
    const name = lockName('sh-limit');
    const a = granted(await backend.tryAcquire(shared(name, 'a', 2)));
    const b = granted(await backend.tryAcquire(shared(name, 'b', 2)));
    expect(b.token).toBeGreaterThan(a.token);
    const c = await backend.tryAcquire(shared(name, 'c', 2));
    expect(c.granted).toBe(false);
    // At the limit: in once the soonest holder (a) ends.
    expect(!c.granted && c.ttlRemainingMs).toBeGreaterThan(9_000);
    expect(!c.granted && c.ttlRemainingMs).toBeLessThanOrEqual(10_000);
    expect(await backend.release({ name, token: a.token, keyHash: 'k-a' })).toBe(true);
    const c2 = granted(await backend.tryAcquire(shared(name, 'c', 2)));
    expect(c2.token).toBeGreaterThan(b.token);
  });

  it('an exclusive request is refused beside shared holders, and shared ones beside it', async () => {
    const backend = await server();
    const name = lockName('sh-excl');
    const a = granted(await backend.tryAcquire(shared(name, 'a', 5, { ttlMs: 3_000 })));
    granted(await backend.tryAcquire(shared(name, 'b', 5, { ttlMs: 8_000 })));
    const x = await backend.tryAcquire(exclusive(name, 'x'));
    expect(x.granted).toBe(false);
    // Exclusive waits for the latest shared holder to end.
    expect(!x.granted && x.ttlRemainingMs).toBeGreaterThan(7_000);
    await backend.revoke!(name);
    const held = granted(await backend.tryAcquire(exclusive(name, 'x')));
    expect(held.token).toBeGreaterThan(a.token);
    const s = await backend.tryAcquire(shared(name, 's', 5));
    expect(s.granted).toBe(false);
    expect(!s.granted && s.conflict).toBeUndefined();
    // A reader's token after the writer's is above it again.
    await backend.release({ name, token: held.token, keyHash: 'k-x' });
    expect(granted(await backend.tryAcquire(shared(name, 's', 5))).token).toBeGreaterThan(
      held.token,
    );
  });

  it('answers conflicts: other mode for the same owner and key, other limit for shared', async () => {
    const backend = await server();
    const name = lockName('sh-conflict');
    granted(await backend.tryAcquire(shared(name, 'a', 3)));
    expect(await backend.tryAcquire(exclusive(name, 'a'))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    expect(await backend.tryAcquire(shared(name, 'b', 4))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    // The same owner with another key is another requester: no conflict of mode.
    const other = await backend.tryAcquire(exclusive(name, 'a', { keyHash: 'other' }));
    expect(other.granted === false && other.conflict).toBeUndefined();
    const name2 = lockName('sh-conflict-x');
    granted(await backend.tryAcquire(exclusive(name2, 'a')));
    expect(await backend.tryAcquire(shared(name2, 'a', 3))).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
  });

  it("refreshes the same owner's shared holder (same token), and only with its key", async () => {
    const backend = await server();
    const name = lockName('sh-refresh');
    const a = granted(await backend.tryAcquire(shared(name, 'a', 2, { ttlMs: 1_000 })));
    granted(await backend.tryAcquire(shared(name, 'b', 2)));
    const again = granted(await backend.tryAcquire(shared(name, 'a', 2, { ttlMs: 9_000 })));
    expect(again.token).toBe(a.token);
    const state = await backend.inspect(name);
    expect(state?.holders?.find((h) => h.token === a.token)?.ttlRemainingMs).toBeGreaterThan(8_000);
    // Another key of the same owner is a third holder: the limit (2) refuses it.
    expect((await backend.tryAcquire(shared(name, 'a', 2, { keyHash: 'x' }))).granted).toBe(false);
  });

  it('release and extend touch one holder, by token and key hash', async () => {
    const backend = await server();
    const name = lockName('sh-per-holder');
    const a = granted(await backend.tryAcquire(shared(name, 'a', 3, { ttlMs: 2_000 })));
    const b = granted(await backend.tryAcquire(shared(name, 'b', 3, { ttlMs: 2_000 })));
    expect(await backend.release({ name, token: a.token, keyHash: 'wrong' })).toBe(false);
    expect(await backend.extend({ name, token: b.token, keyHash: 'wrong', ttlMs: 9_000 })).toBe(
      null,
    );
    const extended = await backend.extend({ name, token: b.token, keyHash: 'k-b', ttlMs: 9_000 });
    expect(extended).toMatchObject({ owner: 'b', token: b.token });
    const state = await backend.inspect(name);
    const ttls = new Map(state?.holders?.map((h) => [h.owner, h.ttlRemainingMs]));
    expect(ttls.get('a')).toBeLessThanOrEqual(2_000);
    expect(ttls.get('b')).toBeGreaterThan(8_000);
    expect(await backend.release({ name, token: a.token, keyHash: 'k-a' })).toBe(true);
    expect(await backend.release({ name, token: a.token, keyHash: 'k-a' })).toBe(false);
    expect((await backend.inspect(name))?.holders?.map((h) => h.owner)).toEqual(['b']);
    expect(await backend.release({ name, token: b.token, keyHash: 'k-b' })).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    // Nothing of the name is left but its fence.
    expect(await rawKeys(name)).toEqual([`dlm:{${nameKeys('dlm:', name).hex}}:fence`]);
  });

  it('inspect lists holders by token with the highest at the top, mode and limit', async () => {
    const backend = await server();
    const name = lockName('sh-inspect');
    const grants: Grant[] = [];
    for (const owner of ['a', 'b', 'c']) {
      grants.push(granted(await backend.tryAcquire(shared(name, owner, 4))));
    }
    const state = await backend.inspect(name);
    expect(state).toMatchObject({
      name,
      mode: 'shared',
      limit: 4,
      owner: 'c',
      token: grants[2]!.token,
    });
    expect(state?.holders?.map((h) => [h.owner, h.token])).toEqual(
      grants.map((g) => [g.owner, g.token]),
    );
    expect(await backend.list!(name)).toEqual([expect.objectContaining({ name, mode: 'shared' })]);
  });

  it('each holder expires on its own, with one expired event per holder, unprompted', async () => {
    const backend = await server();
    const name = lockName('sh-expiry');
    const { events, stop } = recorder(backend, name);
    const a = granted(await backend.tryAcquire(shared(name, 'a', 3, { ttlMs: 300 })));
    const b = granted(await backend.tryAcquire(shared(name, 'b', 3, { ttlMs: 600 })));
    const c = granted(await backend.tryAcquire(shared(name, 'c', 3, { ttlMs: 30_000 })));
    await until(async () => events.filter((e) => e.type === 'expired').length >= 2, {
      what: 'two expiries',
      timeoutMs: 5_000,
    });
    // A look after both ended: only c is left; a write script that drops their entries
    // publishes no second expiry (Redis already told it).
    expect((await backend.inspect(name))?.holders?.map((h) => h.token)).toEqual([c.token]);
    granted(await backend.tryAcquire(shared(name, 'd', 3)));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const expired = events.filter((e) => e.type === 'expired').map((e) => e.token);
    expect(expired.sort()).toEqual([a.token, b.token].sort());
    const acquired = events.filter((e) => e.type === 'acquired');
    expect(acquired.map((e) => [e.token, e.mode, e.holders])).toEqual([
      [a.token, 'shared', 1],
      [b.token, 'shared', 2],
      [c.token, 'shared', 3],
      [expect.any(BigInt), 'shared', 2],
    ]);
    stop();
  });

  it('revoke ends every holder, with a revoked event for each', async () => {
    const backend = await server();
    const name = lockName('sh-revoke');
    const { events, stop } = recorder(backend, name);
    const tokens = [
      granted(await backend.tryAcquire(shared(name, 'a', 3))).token,
      granted(await backend.tryAcquire(shared(name, 'b', 3))).token,
    ];
    expect(await backend.revoke!(name)).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    await until(async () => events.filter((e) => e.type === 'revoked').length >= 2, {
      what: 'two revocations',
    });
    expect(
      events
        .filter((e) => e.type === 'revoked')
        .map((e) => e.token)
        .sort(),
    ).toEqual(tokens.sort());
    expect(await backend.revoke!(name)).toBe(false);
    stop();
  });

  it('N concurrent shared try-locks with limit L on two backends grant exactly L', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('sh-race');
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        (i % 2 ? one : two).tryAcquire(shared(name, `o${i}`, 5)),
      ),
    );
    const grants = results.filter((r) => r.granted);
    expect(grants).toHaveLength(5);
    expect((await one.inspect(name))?.holders).toHaveLength(5);
  });

  it('queues S,S,X,S across two backends in FIFO order across modes', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('sh-fifo');
    const holder = granted(await one.tryAcquire(exclusive(name, 'holder')));
    const order: string[] = [];
    const signal = new AbortController().signal;
    const entries = (n: number) =>
      until(async () => (await queueProbe({ url: redis().url }).entries(name)).length >= n, {
        what: `${n} queued`,
      });
    const queued = (backend: RedisBackend, request: AcquireRequest) =>
      backend.acquireQueued!({ ...request, signal }).then((result) => {
        order.push(request.owner);
        return granted(result);
      });
    const s1 = queued(one, shared(name, 's1', 10));
    await entries(1);
    const s2 = queued(two, shared(name, 's2', 10));
    await entries(2);
    const x = queued(one, exclusive(name, 'x'));
    await entries(3);
    const s3 = queued(two, shared(name, 's3', 10));
    await entries(4);
    await one.release({ name, token: holder.token, keyHash: 'k-holder' });
    const [g1, g2] = await Promise.all([s1, s2]);
    // Both readers hold together (in either order: both were at the head at once); the writer
    // and the reader behind it wait.
    expect((await one.inspect(name))?.holders?.map((h) => h.owner).sort()).toEqual(['s1', 's2']);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect([...order].sort()).toEqual(['s1', 's2']);
    await one.release({ name, token: g1.token, keyHash: 'k-s1' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(order).toHaveLength(2);
    await two.release({ name, token: g2.token, keyHash: 'k-s2' });
    const gx = await x;
    // biome-ignore lint/complexity/useMathMinMax: Math.max does not take bigints
    expect(gx.token).toBeGreaterThan(g1.token > g2.token ? g1.token : g2.token);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(order.slice(2)).toEqual(['x']);
    await one.release({ name, token: gx.token, keyHash: 'k-x' });
    const g3 = await s3;
    expect(g3.token).toBeGreaterThan(gx.token);
    expect(order.slice(2)).toEqual(['x', 's3']);
    expect(await queueProbe({ url: redis().url }).entries(name)).toEqual([]);
  });

  it('a semaphore at its limit admits the next waiter promptly on a release', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('sh-sem-release');
    const a = granted(await one.tryAcquire(shared(name, 'a', 1)));
    const waiting = two.acquireQueued!({
      ...shared(name, 'b', 1),
      signal: new AbortController().signal,
    });
    await until(async () => (await queueProbe({ url: redis().url }).entries(name)).length >= 1, {
      what: 'b queued',
    });
    const releasedAt = performance.now();
    await one.release({ name, token: a.token, keyHash: 'k-a' });
    const b = granted(await waiting);
    expect(performance.now() - releasedAt).toBeLessThan(500);
    expect(b.token).toBeGreaterThan(a.token);
  });

  it("a semaphore at its limit admits the next waiter at a holder's expiry, not a poll", async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('sh-sem-expiry');
    granted(await one.tryAcquire(shared(name, 'a', 2, { ttlMs: 20_000 })));
    granted(await one.tryAcquire(shared(name, 'b', 2, { ttlMs: 800 })));
    const startedAt = performance.now();
    const c = granted(
      await two.acquireQueued!({ ...shared(name, 'c', 2), signal: new AbortController().signal }),
    );
    const waitedMs = performance.now() - startedAt;
    // b's lease ran out at ~800 ms; the keyspace expiry of its marker woke c.
    expect(waitedMs).toBeGreaterThan(700);
    expect(waitedMs).toBeLessThan(800 + 900);
    expect(c.owner).toBe('c');
  });

  it('acquireQueued answers a conflict at once instead of waiting', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('sh-queued-conflict');
    granted(await one.tryAcquire(shared(name, 'a', 2)));
    const result = await two.acquireQueued!({
      ...shared(name, 'b', 3),
      signal: AbortSignal.timeout(5_000),
    });
    expect(result).toEqual({ granted: false, conflict: { field: 'limit', limit: 2 } });
    // With a waiter queued (at the limit), a request with another limit is answered too.
    granted(await one.tryAcquire(shared(name, 'b', 2)));
    const cancel = new AbortController();
    const behind = one.acquireQueued!({ ...shared(name, 'c', 2), signal: cancel.signal });
    await until(async () => (await queueProbe({ url: redis().url }).entries(name)).length >= 1, {
      what: 'c queued',
    });
    const queuedConflict = await two.acquireQueued!({
      ...shared(name, 'd', 7),
      signal: AbortSignal.timeout(5_000),
    });
    expect(queuedConflict).toEqual({ granted: false, conflict: { field: 'limit', limit: 2 } });
    cancel.abort();
    expect((await behind).granted).toBe(false);
    expect(await queueProbe({ url: redis().url }).entries(name)).toEqual([]);
  });
});
