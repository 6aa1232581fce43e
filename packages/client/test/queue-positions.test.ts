import { describe, expect, it } from 'vitest';
import { eventually, lockName, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

describe('onQueued and get().waiters', () => {
  it('a waiting acquire hears its place when it starts waiting and when one ahead leaves', async () => {
    const [a, b, c] = [client(), client(), client()];
    const name = lockName('queued');
    const held = await a.acquire(name, { ttlMs: 10_000 });
    const toldB: number[] = [];
    // A wait the server ends (its waitMs runs out): a client's abort does not reach the server.
    const waitB = b.acquire(name, {
      ttlMs: 10_000,
      waitMs: 1_500,
      retry: false,
      onQueued: (position) => toldB.push(position),
    });
    await eventually(() => toldB.length === 1);
    const toldC: number[] = [];
    const waitC = c.acquire(name, {
      ttlMs: 10_000,
      waitMs: 20_000,
      onQueued: (position) => toldC.push(position),
    });
    await eventually(() => toldC.length === 1);
    expect(await a.get(name)).toMatchObject({ held: true, waiters: 2, waitersScope: 'server' });
    await expect(waitB).rejects.toMatchObject({ code: 'LOCK_HELD' });
    await eventually(() => toldC.length === 2);
    await held.release();
    const lease = await waitC;
    expect(toldB).toEqual([1]);
    expect(toldC).toEqual([2, 1]);
    expect(await a.get(name)).toMatchObject({ held: true, waiters: 0, waitersScope: 'server' });
    await lease.release();
  });

  it('a lock that is free is granted without a position', async () => {
    const a = client();
    const told: number[] = [];
    const lease = await a.acquire(lockName('queued-free'), {
      ttlMs: 10_000,
      waitMs: 5_000,
      onQueued: (position) => told.push(position),
    });
    await lease.release();
    expect(told).toEqual([]);
  });
});
