import { lockName, until } from '@dlm/conformance';
import { createLockService, type LockService, type LostEvent } from '@dlm/core';
import { redisAvailable } from '@dlm/test-services';
import { afterEach, describe, expect, it } from 'vitest';
import { type RedisBackend, redisBackend } from '../src/index.js';
import { queueProbe } from './queue-probe.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();

/** Read locks and semaphores through core's lock service, on a real Redis, two services. */
describe.skipIf(!enabled)('redis shared modes through the lock service', () => {
  const redis = useRedis();
  const opened: Array<{ service: LockService; backend: RedisBackend }> = [];
  afterEach(async () => {
    for (const { service, backend } of opened.splice(0)) {
      await service.close();
      await backend.close();
    }
  });
  const server = async () => {
    const backend = redisBackend({ url: redis().url });
    await backend.ready();
    const service = createLockService({ backend });
    opened.push({ service, backend });
    return service;
  };

  it('readers share, a writer waits for all of them, and a reader behind the writer waits for it', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('svc-rw');
    const r1 = await one.acquire({ name, owner: 'r1', ttlMs: 10_000, mode: 'shared' });
    const r2 = await two.acquire({ name, owner: 'r2', ttlMs: 10_000, mode: 'shared' });
    expect(r1).toMatchObject({ mode: 'shared', limit: one.limits.maxHolders });
    const state = await one.get(name);
    expect(state?.holders?.map((h) => h.owner)).toEqual(['r1', 'r2']);
    const writer = two.acquire({ name, owner: 'w', ttlMs: 10_000, waitMs: 10_000 });
    // In Redis's queue, not only counted by its service: the reader must come behind it.
    const queued = (count: number) => async () =>
      (await queueProbe({ url: redis().url }).entries(name)).length === count;
    await until(queued(1), { what: 'the writer queued' });
    const late = one.acquire({ name, owner: 'r3', ttlMs: 10_000, mode: 'shared', waitMs: 10_000 });
    await until(queued(2), { what: 'the late reader queued' });
    await one.release({ name, token: r1.token, leaseKey: r1.leaseKey });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(two.waiters(name)).toBe(1);
    await two.release({ name, token: r2.token, leaseKey: r2.leaseKey });
    const w = await writer;
    expect(w.token).toBeGreaterThan(r2.token);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(one.waiters(name)).toBe(1);
    await two.release({ name, token: w.token, leaseKey: w.leaseKey });
    const r3 = await late;
    expect(r3.token).toBeGreaterThan(w.token);
  });

  it('a semaphore of 2 admits a third holder when one permit expires, and tells that holder', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('svc-sem');
    const lost: LostEvent[] = [];
    await one.acquire({ name, owner: 'a', ttlMs: 20_000, mode: 'shared', limit: 2 });
    const b = await one.acquire({
      name,
      owner: 'b',
      ttlMs: 700,
      mode: 'shared',
      limit: 2,
      onLost: (event) => lost.push(event),
    });
    const startedAt = performance.now();
    const c = await two.acquire({
      name,
      owner: 'c',
      ttlMs: 10_000,
      mode: 'shared',
      limit: 2,
      waitMs: 5_000,
    });
    expect(performance.now() - startedAt).toBeLessThan(700 + 900);
    expect(c.token).toBeGreaterThan(b.token);
    await until(async () => lost.length === 1, { what: "b's loss" });
    expect(lost).toEqual([{ name, token: b.token, reason: 'expired' }]);
  });

  it('a request with another limit, or the other mode for the same lease key, is INVALID_PARAMS', async () => {
    const one = await server();
    const name = lockName('svc-conflict');
    const a = await one.acquire({ name, owner: 'a', ttlMs: 10_000, mode: 'shared', limit: 3 });
    await expect(
      one.acquire({ name, owner: 'b', ttlMs: 10_000, mode: 'shared', limit: 4, waitMs: 1_000 }),
    ).rejects.toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'limit', limit: 3 } });
    await expect(
      one.acquire({ name, owner: 'a', ttlMs: 10_000, leaseKey: a.leaseKey, waitMs: 1_000 }),
    ).rejects.toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'mode' } });
  });
});
