import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { type Locker, type PollOptions, sleep, type Target, WaitTimeout } from './locker.js';

/**
 * The hand-rolled Redis lock most projects start with: `SET key owner NX PX ttl` to acquire,
 * a Lua compare-and-delete to release, and a retry every `pollMs` to wait.
 */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

type RedisWithRelease = Redis & {
  releaseLock(key: string, owner: string): Promise<number>;
};

export function rawRedisTarget(url: string, poll: PollOptions): Target {
  return {
    id: 'peer-raw-redis',
    label: 'raw ioredis SET NX PX',
    kind: 'peer',
    async start() {
      return {
        async connect(): Promise<Locker> {
          const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
          await redis.connect();
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
        },
        async stop() {},
      };
    },
  };
}
