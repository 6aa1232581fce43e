import { runConformance, until } from '@dlm/conformance';
import { isDlmError, type LockBackend } from '@dlm/core';
import {
  type RedisSentinelService,
  redisSentinelAvailable,
  redisSentinelManaged,
  startRedisSentinel,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisBackend, type RedisBackendOptions, redisBackend } from '../src/index.js';
import { queueProbe } from './queue-probe.js';

const enabled = redisSentinelAvailable();

let unique = 0;
const lockName = (label: string) => `sentinel/${label}/${process.pid}-${++unique}`;

describe.skipIf(!enabled)('redis adapter through Sentinel', () => {
  let sentinel: RedisSentinelService;
  beforeAll(async () => {
    sentinel = await startRedisSentinel();
  }, 60_000);
  afterAll(async () => {
    await sentinel?.stop();
  });

  const options = (more: Partial<RedisBackendOptions> = {}): RedisBackendOptions => ({
    sentinels: sentinel.sentinels,
    sentinelName: sentinel.name,
    ...more,
  });

  runConformance('redis (sentinel)', {
    backend: async () => {
      const backend = redisBackend(options());
      await backend.ready();
      return backend;
    },
    fairQueue: { entries: (name) => queueProbe({ master: () => sentinel.master() }).entries(name) },
  });

  runConformance('redis (sentinel, minReplicas 2)', {
    backend: async () => {
      const backend = redisBackend(options({ minReplicas: 2 }));
      await backend.ready();
      return backend;
    },
  });

  it('declares best-effort fencing without minReplicas and strict with it', async () => {
    const plain = redisBackend(options());
    const waiting = redisBackend(options({ minReplicas: 1 }));
    try {
      expect(plain.capabilities.fencing).toBe('best-effort');
      expect(waiting.capabilities.fencing).toBe('strict');
    } finally {
      await Promise.all([plain.close(), waiting.close()]);
    }
  });

  it('answers UNAVAILABLE (indeterminate) when fewer replicas than minReplicas confirm', async () => {
    const backend = redisBackend(options({ minReplicas: 3, replicaTimeoutMs: 50 }));
    try {
      await backend.ready();
      const error = await backend
        .tryAcquire({ name: lockName('wait'), owner: 'a', ttlMs: 5_000 })
        .then(
          () => undefined,
          (caught: unknown) => caught,
        );
      expect(isDlmError(error, 'UNAVAILABLE')).toBe(true);
      expect((error as { details: { indeterminate?: boolean } }).details.indeterminate).toBe(true);
      expect((error as Error).message).toMatch(/only 2 of the 3 replicas .* within 50 ms/);
    } finally {
      await backend.close();
    }
  });

  it('refuses bad Sentinel options with INVALID_PARAMS', () => {
    for (const bad of [
      { sentinels: [] },
      { sentinels: ['127.0.0.1'], sentinelName: 'm' },
      { sentinels: ['127.0.0.1:99999'], sentinelName: 'm' },
      { sentinels: ['127.0.0.1:26379'] },
      { sentinels: ['127.0.0.1:26379'], sentinelName: 'm', minReplicas: -1 },
      { sentinels: ['127.0.0.1:26379'], sentinelName: 'm', replicaTimeoutMs: 0 },
    ] satisfies RedisBackendOptions[]) {
      expect(() => redisBackend(bad), JSON.stringify(bad)).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS' }),
      );
    }
  });

  // Last: it moves the master.
  it.skipIf(!redisSentinelManaged())(
    'follows the promoted replica after kill -9 of the master, keeping confirmed grants',
    async () => {
      const backends: LockBackend[] = [];
      const open = async (more: Partial<RedisBackendOptions>): Promise<RedisBackend> => {
        const backend = redisBackend(options(more));
        backends.push(backend);
        await backend.ready();
        return backend;
      };
      try {
        // Not 2: after the failover only one replica is left (the old master is down).
        const backend = await open({ minReplicas: 1 });
        const held = lockName('held');
        const before = await backend.tryAcquire({ name: held, owner: 'a', ttlMs: 60_000 });
        if (!before.granted) throw new Error('the first grant was refused');
        const watched = lockName('watched');
        const old = await sentinel.master();
        const killedAt = performance.now();
        const killed = await sentinel.killMaster();
        // Time to the first grant through the same backend after the kill.
        let grantedAfterMs = 0;
        await until(
          async () => {
            const result = await backend
              .tryAcquire({ name: watched, owner: 'b', ttlMs: 10_000 })
              .catch(() => undefined);
            if (result?.granted) grantedAfterMs = performance.now() - killedAt;
            return result?.granted === true;
          },
          { timeoutMs: 30_000, intervalMs: 50 },
        );
        console.log(
          `sentinel failover: first grant ${Math.round(grantedAfterMs)} ms after kill -9`,
        );
        expect((await sentinel.master()).port).not.toBe(old.port);
        // Confirmed by a replica before the kill: Sentinel promotes the most up-to-date one.
        const again = await backend.tryAcquire({ name: held, owner: 'c', ttlMs: 1_000 });
        expect(again.granted).toBe(false);
        const state = await backend.inspect(held);
        expect(state?.token).toBe(before.grant.token);
        const next = await backend.tryAcquire({ name: lockName('next'), owner: 'd', ttlMs: 1_000 });
        expect(next.granted && next.grant.token > before.grant.token).toBe(true);
        await killed.start();
      } finally {
        await Promise.all(backends.map((backend) => backend.close()));
      }
    },
    60_000,
  );
});
