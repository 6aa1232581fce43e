import { describe, expect, it } from 'vitest';
import type { Lease } from '../src/index.js';
import { eventually, lockName, sleep, useProxiedServer } from './support.js';

const env = useProxiedServer({ requestTimeoutMs: 2_000 });
const { client, viaProxy } = env;

/** Three fresh names, in an order that is not the sorted one. */
function threeNames(label: string): [string, string, string] {
  const base = lockName(label);
  return [`${base}/c`, `${base}/a`, `${base}/b`];
}

describe('acquireAll', () => {
  it('grants every lock, in request order, each with its own token; release() frees them all', async () => {
    const a = client();
    const b = client();
    const names = threeNames('all');
    const group = await a.acquireAll(names, { ttlMs: 10_000 });
    expect(group.leases.map((lease) => lease.name)).toEqual(names);
    const owners = new Set(group.leases.map((lease) => lease.owner));
    expect(owners.size).toBe(1);
    for (const lease of group.leases) {
      expect(await b.get(lease.name)).toMatchObject({ held: true, token: lease.token });
    }
    expect(group.signal.aborted).toBe(false);
    expect(await group.release()).toBe(true);
    expect(group.signal.aborted).toBe(true);
    for (const name of names)
      expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
    expect(await group.release()).toBe(false);
  });

  it('is all or nothing: one lock held elsewhere fails the call with its name, and none is held', async () => {
    const a = client();
    const b = client();
    const [x, y, z] = threeNames('none');
    const holder = await b.acquire(y, { ttlMs: 10_000 });
    for (const waitMs of [0, 300]) {
      await expect(a.acquireAll([x, y, z], { ttlMs: 10_000, waitMs })).rejects.toMatchObject({
        code: 'LOCK_HELD',
        details: { name: y },
      });
      expect(await b.get(x)).toEqual({ name: x, held: false, waiters: 0, waitersScope: 'server' });
      expect(await b.get(z)).toEqual({ name: z, held: false, waiters: 0, waitersScope: 'server' });
    }
    await holder.release();
    const group = await a.acquireAll([x, y, z], { ttlMs: 10_000 });
    expect(group.leases[1]!.token).toBeGreaterThan(holder.token);
    await group.release();
  });

  it('checks its input before sending: the same codes and fields as the server', async () => {
    // A client of no server: an error other than UNAVAILABLE can only come from the client.
    const offline = await env.clientOfNoServer();
    const cases: [readonly (string | { name: string; mode?: never; limit?: number })[], string][] =
      [
        [[], 'locks'],
        [['a', 'b', 'a'], 'locks'],
        [Array.from({ length: 65 }, (_, i) => `n${i}`), 'locks'],
        [['a', ''], 'name'],
        [[{ name: 'a', mode: 'upgradable' as never }], 'mode'],
        [[{ name: 'a', limit: 2 }], 'limit'],
      ];
    for (const [locks, field] of cases) {
      await expect(offline.acquireAll(locks, { ttlMs: 10_000 })).rejects.toMatchObject({
        code: 'INVALID_PARAMS',
        details: { field },
      });
    }
    await expect(offline.acquireAll(['a'], { ttlMs: 1 })).rejects.toMatchObject({
      details: { field: 'ttlMs' },
    });
  });

  it("the group's signal aborts when any one lease is lost, and the others stay held", async () => {
    const a = client();
    const names = threeNames('lost');
    const group = await a.acquireAll(names, { ttlMs: 10_000 });
    const lost: Lease[] = [];
    a.on('lost', ({ lease }) => lost.push(lease));
    await env.backend.revoke?.(names[1]);
    await eventually(() => group.signal.aborted);
    expect(lost.map((lease) => lease.name)).toEqual([names[1]]);
    expect(group.leases[0]!.signal.aborted).toBe(false);
    // release() frees what is still held, and says that not every lease was.
    expect(await group.release()).toBe(false);
    expect(await env.backend.inspect(names[0])).toBeNull();
  });

  it('an acquireAll whose reply was lost is re-sent with the same owner and key and returns those same leases', async () => {
    const a = viaProxy();
    const names = threeNames('retry');
    await a.connect();
    env.proxy.blackhole('replies');
    const acquiring = a.acquireAll(names, { ttlMs: 5_000 });
    // The server grants them; the reply never arrives; the connection drops.
    await eventually(async () => (await env.backend.inspect(names[2])) !== null, 2_000);
    const granted = await Promise.all(names.map((name) => env.backend.inspect(name)));
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    const group = await acquiring;
    // The retry was answered as a re-entry: the one set of grants, not a second.
    expect(group.leases.map((lease) => lease.token)).toEqual(granted.map((state) => state?.token));
    // The lost try's cleanup did not free the leases the retry handed back.
    await sleep(300);
    for (const lease of group.leases) {
      expect(await env.backend.inspect(lease.name)).toMatchObject({ token: lease.token });
    }
    expect(await group.release()).toBe(true);
  });
});

describe('withLock over several names', () => {
  it('keeps every lease extended past its TTL while fn runs, then releases them all', async () => {
    const a = client();
    const b = client();
    const names = threeNames('with-lock');
    const tokens = await a.withLock(names, { ttlMs: 500 }, async (signal, group) => {
      // TTLs in these tests leave room for a loaded CI machine's event-loop stalls.
      await sleep(1_600);
      expect(signal.aborted).toBe(false);
      for (const lease of group.leases) {
        expect(await b.get(lease.name)).toMatchObject({ held: true, token: lease.token });
      }
      return group.leases.map((lease) => lease.token);
    });
    expect(tokens).toHaveLength(3);
    for (const name of names)
      expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it("aborts fn's signal when any lease is lost", async () => {
    const a = client();
    const names = threeNames('with-lock-lost');
    const run = a.withLock(names, { ttlMs: 10_000 }, async (signal) => {
      await env.backend.revoke?.(names[2]);
      await new Promise((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    });
    await expect(run).rejects.toMatchObject({ code: 'NOT_HOLDER' });
    for (const name of names) expect(await env.backend.inspect(name)).toBeNull();
  });
});
