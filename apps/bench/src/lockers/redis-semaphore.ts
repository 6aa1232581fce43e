import type { Redis } from 'ioredis';
import { Mutex, Semaphore, TimeoutError } from 'redis-semaphore';
import { type Locker, type PollOptions, peerTarget, type Target, WaitTimeout } from './locker.js';
import { connectRedis } from './redis-connection.js';

/**
 * `redis-semaphore`'s `Mutex` on one Redis, and its `Semaphore` for a shared acquire with a
 * limit (workload 6): a new instance per acquire (its instances are single-use holders), no
 * background refresh (the other contenders have none either), and its retry loop at the shared
 * poll interval (10 ms is also its default). It has no read-write lock.
 */
/** One contender: a Mutex or Semaphore per acquire on its own connection. */
function semaphoreLocker(redis: Redis, poll: PollOptions): Locker {
  return {
    async acquire(name, { ttlMs, waitMs, mode, limit }) {
      const options = {
        lockTimeout: ttlMs,
        // A try-lock is one attempt; its time bound must not cut that attempt short.
        acquireTimeout: waitMs > 0 ? waitMs : 10_000,
        acquireAttemptsLimit: waitMs > 0 ? Number.POSITIVE_INFINITY : 1,
        retryInterval: poll.pollMs,
        refreshInterval: 0,
      };
      if (mode === 'shared' && limit === undefined) {
        throw new Error('redis-semaphore has no read-write lock');
      }
      const holder =
        mode === 'shared'
          ? new Semaphore(redis, name, limit!, options)
          : new Mutex(redis, name, options);
      await holder.acquire().catch((error: unknown) => {
        throw error instanceof TimeoutError ? new WaitTimeout(name) : error;
      });
      return { release: () => holder.release() };
    },
    async close() {
      await redis.quit();
    },
  };
}

export function redisSemaphoreTarget(url: string, poll: PollOptions): Target {
  return peerTarget(
    'peer-redis-semaphore',
    'redis-semaphore Mutex / Semaphore',
    async () => semaphoreLocker(await connectRedis(url), poll),
    { sharedWorkloads: ['semaphore'] },
  );
}
