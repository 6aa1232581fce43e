import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import {
  type Locker,
  type PollOptions,
  peerTarget,
  sleep,
  type Target,
  WaitTimeout,
} from './locker.js';
import { connectRedis } from './redis-connection.js';

/**
 * The hand-rolled Redis lock most projects start with: `SET key owner NX PX ttl` to acquire,
 * a Lua compare-and-delete to release, and a retry every `pollMs` to wait.
 */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

type RedisWithRelease = Redis & {
  releaseLock(key: string, owner: string): Promise<number>;
};

export function rawRedisTarget(url: string, poll: PollOptions): Target {
  return peerTarget('peer-raw-redis', 'raw ioredis SET NX PX', async (): Promise<Locker> => {
    const redis = await connectRedis(url);
    redis.defineCommand('releaseLock', { numberOfKeys: 1, lua: RELEASE });
    const client = redis as RedisWithRelease;
    return {
      async acquire(name, { ttlMs, waitMs }) {
        const owner = randomUUID();
        const deadline = performance.now() + waitMs;
        for (;;) {
          if ((await client.set(name, owner, 'PX', ttlMs, 'NX')) === 'OK') {
            return {
              async release() {
                await client.releaseLock(name, owner);
              },
            };
          }
          if (performance.now() + poll.pollMs > deadline) throw new WaitTimeout(name);
          await sleep(poll.pollMs);
        }
      },
      async close() {
        await client.quit();
      },
    };
  });
}
