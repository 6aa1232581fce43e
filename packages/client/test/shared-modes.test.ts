import { isDlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { Lease, LockChange } from '../src/index.js';
import { eventually, lockName, pendingAfter, sleep, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

describe('semaphore', () => {
  it('admits limit permits at once, refuses the next, and hands a released permit to a waiter', async () => {
    const a = client();
    const b = client();
    const name = lockName('semaphore');
    const pool = a.semaphore(name, 2);
    const first = await pool.acquire({ ttlMs: 10_000 });
    const second = await pool.acquire({ ttlMs: 10_000 });
    expect([first.mode, first.limit, second.mode, second.limit]).toEqual([
      'shared',
      2,
      'shared',
      2,
    ]);
    expect(second.token).toBeGreaterThan(first.token);
    expect(first.owner).not.toBe(second.owner);
    expect(await b.semaphore(name, 2).tryAcquire({ ttlMs: 10_000 })).toBeNull();
    const info = await b.get(name);
    expect(info).toMatchObject({ held: true, mode: 'shared', limit: 2, token: second.token });
    expect(info.held && info.holders.map((holder) => holder.token)).toEqual([
      first.token,
      second.token,
    ]);

    const waiting = b.semaphore(name, 2).acquire({ ttlMs: 10_000, waitMs: 5_000 });
    expect(await pendingAfter(waiting, 300)).toBe(true);
    const releasedAt = performance.now();
    await first.release();
    const third = await waiting;
    expect(performance.now() - releasedAt).toBeLessThan(2_000);
    expect(third.token).toBeGreaterThan(second.token);
    await Promise.all([second.release(), third.release()]);
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it('withPermit holds a permit while fn runs and releases it after, even when fn throws', async () => {
    const a = client();
    const name = lockName('with-permit');
    const pool = a.semaphore(name, 1);
    const seen = await pool.withPermit({ ttlMs: 5_000 }, async (signal, permit) => {
      expect(signal.aborted).toBe(false);
      expect(await pool.tryAcquire({ ttlMs: 5_000 })).toBeNull();
      return permit.mode;
    });
    expect(seen).toBe('shared');
    await expect(
      pool.withPermit({ ttlMs: 5_000 }, async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await a.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it('another limit than the holders is INVALID_PARAMS limit with their limit; bad limits never reach the server', async () => {
    const a = client();
    const b = client();
    const name = lockName('mismatch');
    const permit = await a.semaphore(name, 2).acquire({ ttlMs: 10_000 });
    const error = await b
      .semaphore(name, 3)
      .acquire({ ttlMs: 10_000, waitMs: 5_000 })
      .catch((e: unknown) => e);
    expect(isDlmError(error, 'INVALID_PARAMS')).toBe(true);
    expect((error as { details: Record<string, unknown> }).details).toMatchObject({
      field: 'limit',
      limit: 2,
    });
    await permit.release();
    for (const limit of [0, -1, 1.5, 10_001, Number.NaN]) {
      expect(() => a.semaphore(name, limit), String(limit)).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'limit' } }),
      );
    }
    await expect(a.acquire(name, { ttlMs: 1_000, limit: 2 })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      details: { field: 'limit' },
    });
  });
});

describe('readWriteLock', () => {
  it('readers share; a waiting writer is granted after them and before a reader that came later', async () => {
    const a = client();
    const b = client();
    const name = lockName('rw');
    const rw = a.readWriteLock(name);
    const readers = [
      await rw.read({ ttlMs: 10_000 }),
      await b.readWriteLock(name).read({ ttlMs: 10_000 }),
    ];
    expect(readers.map((lease) => lease.mode)).toEqual(['shared', 'shared']);
    expect(await rw.tryWrite({ ttlMs: 10_000 })).toBeNull();

    const order: string[] = [];
    const writer = b
      .readWriteLock(name)
      .withWrite({ ttlMs: 10_000, waitMs: 5_000 }, async (_signal, lease) => {
        order.push(`writer:${lease.mode}`);
        await sleep(200);
      });
    await sleep(200);
    const lateReader = rw.withRead({ ttlMs: 10_000, waitMs: 5_000 }, async () => {
      order.push('late reader');
    });
    expect(await pendingAfter(Promise.all([writer, lateReader]), 300)).toBe(true);
    expect(order).toEqual([]);
    expect(
      await rw.tryRead({ ttlMs: 10_000 }),
      'a reader may not jump a waiting writer',
    ).toBeNull();
    await Promise.all(readers.map((lease) => lease.release()));
    await Promise.all([writer, lateReader]);
    expect(order).toEqual(['writer:exclusive', 'late reader']);
  });

  it('the same owner holding shared cannot take the name exclusive (INVALID_PARAMS mode)', async () => {
    const a = client();
    const name = lockName('no-upgrade');
    const reader: Lease = await a.acquire(name, { ttlMs: 10_000, mode: 'shared', owner: 'o-1' });
    await expect(a.acquire(name, { ttlMs: 10_000, owner: 'o-1' })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      details: { field: 'mode' },
    });
    const again = await a.acquire(name, { ttlMs: 10_000, mode: 'shared', owner: 'o-1' });
    expect(again.token).toBe(reader.token);
    await reader.release();
  });
});

describe('shared modes elsewhere', () => {
  it('acquireAll takes a shared entry beside an exclusive one; watch counts the holders', async () => {
    const a = client();
    const b = client();
    const base = lockName('all-shared');
    const [shared, exclusive] = [`${base}/s`, `${base}/x`];
    const changes: LockChange[] = [];
    const watch = await b.watch(shared, (change) => changes.push(change));
    const group = await a.acquireAll([{ name: shared, mode: 'shared', limit: 3 }, exclusive], {
      ttlMs: 10_000,
    });
    expect(group.leases.map((lease) => [lease.mode, lease.limit])).toEqual([
      ['shared', 3],
      ['exclusive', undefined],
    ]);
    const permit = await b.semaphore(shared, 3).acquire({ ttlMs: 10_000 });
    await group.release();
    await permit.release();
    await eventually(() => changes.length >= 5);
    await watch.stop();
    expect(changes.slice(1).map((change) => [change.held, change.holders])).toEqual([
      [true, 1],
      [true, 2],
      [true, 1],
      [false, 0],
    ]);
    expect(changes.slice(1, 3).map((change) => change.mode)).toEqual(['shared', 'shared']);
  });
});
