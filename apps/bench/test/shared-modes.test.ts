import {
  type RedisService,
  startRedis,
  startZooKeeper,
  type ZooKeeperService,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Held, type Locker, type RunningTarget, WaitTimeout } from '../src/lockers/locker.js';
import { createTargets, selectSpecs } from '../src/targets.js';
import { probeSharedModes, runSharedModes } from '../src/workloads/shared-modes.js';

const window = { clients: 8, durationMs: 400, warmupMs: 50, holdMs: 1, waitMs: 5_000 };
const ttlMs = 10_000;

/** A "lock" that grants every request at once: what the workloads' counters must catch. */
const grantsEverything: RunningTarget = {
  async connect(): Promise<Locker> {
    return { acquire: async () => ({ release: async () => {} }), close: async () => {} };
  },
  async stop() {},
};

/** Resolves with how a pending acquire ended within `ms`: held, or still waiting. */
async function within(pending: Promise<Held>, ms: number): Promise<'held' | 'waiting'> {
  return Promise.race([
    pending.then(() => 'held' as const),
    new Promise<'waiting'>((resolve) => setTimeout(() => resolve('waiting'), ms)),
  ]);
}

describe('workloads 6 and 7: the holder counters', () => {
  it('count a semaphore granted beyond its limit and a writer beside readers as violations', async () => {
    const semaphore = await runSharedModes(grantsEverything, 'x', 'semaphore', {
      ...window,
      ttlMs,
    });
    expect(semaphore.violations).toBeGreaterThan(0);
    expect(semaphore.maxHolders).toBeGreaterThan(4);
    const readWrite = await runSharedModes(grantsEverything, 'x', 'read-write', {
      ...window,
      ttlMs,
    });
    expect(readWrite.violations).toBeGreaterThan(0);
  });

  it('the probe finds no shared modes where a second shared holder is refused', async () => {
    // One holder at a time, whatever the mode: an exclusive-only lock.
    let held = false;
    const exclusiveOnly: RunningTarget = {
      async connect() {
        return {
          async acquire(name) {
            if (held) throw new WaitTimeout(name);
            held = true;
            return {
              release: async () => {
                held = false;
              },
            };
          },
          close: async () => {},
        };
      },
      async stop() {},
    };
    expect(await probeSharedModes(exclusiveOnly, 'p')).toMatch(/second shared holder was refused/);
    expect(held).toBe(false);
    expect(await probeSharedModes(grantsEverything, 'p')).toBeNull();
  });
});

describe('workloads 6 and 7 on dlm: lib-embedded (core over the embedded adapter, in process)', () => {
  it('passes the probe and runs both with no violation, the semaphore filling to its limit', async () => {
    const [target] = createTargets(selectSpecs(['lib-embedded']), {}, { pollMs: 10, runId: 's' });
    const running = await target!.start();
    try {
      expect(await probeSharedModes(running, 'probe')).toBeNull();
      const sem = await runSharedModes(running, 'l6', 'semaphore', { ...window, ttlMs });
      expect(sem).toMatchObject({ violations: 0, errors: 0, maxHolders: 4 });
      const rw = await runSharedModes(running, 'l7', 'read-write', { ...window, ttlMs });
      expect(rw).toMatchObject({ violations: 0, errors: 0 });
      expect(rw.reads!.grants).toBeGreaterThan(0);
      expect(rw.writes!.grants).toBeGreaterThan(0);
    } finally {
      await running.stop();
    }
  }, 60_000);
});

describe('the shared-mode peers on real services', () => {
  let redis: RedisService;
  let zookeeper: ZooKeeperService;
  beforeAll(async () => {
    [redis, zookeeper] = await Promise.all([startRedis(), startZooKeeper()]);
  }, 120_000);
  afterAll(async () => {
    await Promise.allSettled([redis?.stop(), zookeeper?.stop()]);
  });

  const start = async (id: string) => {
    const [target] = createTargets(
      selectSpecs([id]),
      { redis, zookeeper },
      { pollMs: 10, runId: `t${Date.now()}` },
    );
    return target!.start();
  };

  it('ZooKeeper read-write recipe: readers together, a writer waits for them, a later reader waits for the writer', async () => {
    const running = await start('peer-zk-rwlock');
    const [a, b, w, c] = await Promise.all([1, 2, 3, 4].map(() => running.connect()));
    try {
      const read = { ttlMs, waitMs: 10_000, mode: 'shared' as const };
      const r1 = await a!.acquire('rw', read);
      const r2 = await b!.acquire('rw', read); // a second reader at once
      const writer = w!.acquire('rw', { ttlMs, waitMs: 10_000 });
      expect(await within(writer, 300)).toBe('waiting');
      // A reader that comes after the waiting writer waits too (no writer starvation).
      const late = c!.acquire('rw', read);
      expect(await within(late, 300)).toBe('waiting');
      await r1.release();
      expect(await within(writer, 300)).toBe('waiting');
      await r2.release();
      const held = await writer;
      expect(await within(late, 300)).toBe('waiting');
      await held.release();
      await (await late).release();
      // A try-lock write while a reader holds is refused.
      const r3 = await a!.acquire('rw', read);
      await expect(w!.acquire('rw', { ttlMs, waitMs: 0 })).rejects.toBeInstanceOf(WaitTimeout);
      await r3.release();
    } finally {
      await Promise.all([a, b, w, c].map((locker) => locker!.close()));
      await running.stop();
    }
  }, 60_000);

  it('runs workload 7 on the recipe and workload 6 on redis-semaphore with no violation', async () => {
    const zk = await start('peer-zk-rwlock');
    const rw = await runSharedModes(zk, 'w7', 'read-write', { ...window, ttlMs });
    await zk.stop();
    expect(rw.violations).toBe(0);
    expect(rw.errors).toBe(0);
    expect(rw.reads!.grants).toBeGreaterThan(0);
    const redisTarget = await start('peer-redis-semaphore');
    const sem = await runSharedModes(redisTarget, 'w6', 'semaphore', { ...window, ttlMs });
    await redisTarget.stop();
    expect(sem.violations).toBe(0);
    expect(sem.errors).toBe(0);
    expect(sem.grants).toBeGreaterThan(0);
    // 8 clients after 4 permits, each held a millisecond: the semaphore fills up.
    expect(sem.maxHolders).toBe(4);
  }, 60_000);
});
