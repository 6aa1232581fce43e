import { Mutex, TimeoutError } from 'redis-semaphore';
import { type Locker, type PollOptions, peerTarget, type Target, WaitTimeout } from './locker.js';
import { connectRedis } from './redis-connection.js';

/**
 * `redis-semaphore`'s `Mutex` on one Redis: a new `Mutex` per acquire (its instances are
 * single-use holders), no background refresh (the other contenders have none either), and its
 * retry loop at the shared poll interval (10 ms is also its default).
 */
export function redisSemaphoreTarget(url: string, poll: PollOptions): Target {
  return peerTarget('peer-redis-semaphore', 'redis-semaphore Mutex', async (): Promise<Locker> => {
    const redis = await connectRedis(url);
    return {
      async acquire(name, { ttlMs, waitMs }) {
        const mutex = new Mutex(redis, name, {
          lockTimeout: ttlMs,
          // A try-lock is one attempt; its time bound must not cut that attempt short.
          acquireTimeout: waitMs > 0 ? waitMs : 10_000,
          acquireAttemptsLimit: waitMs > 0 ? Number.POSITIVE_INFINITY : 1,
          retryInterval: poll.pollMs,
          refreshInterval: 0,
        });
        await mutex.acquire().catch((error: unknown) => {
          throw error instanceof TimeoutError ? new WaitTimeout(name) : error;
        });
        return { release: () => mutex.release() };
      },
      async close() {
        await redis.quit();
      },
    };
  });
}
