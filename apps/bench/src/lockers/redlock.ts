import { Redis } from 'ioredis';
import Redlock, { ExecutionError } from 'redlock';
import { type Locker, type PollOptions, type Target, WaitTimeout } from './locker.js';

/**
 * `redlock` 5.0.0-beta.2 over independent Redis nodes, as its README shows it: one ioredis
 * connection per node, `redlock.acquire([name], ttlMs)`, `lock.release()`. Waiting is its own
 * retry loop, given the same interval as every other polling peer (its default is 200 ms ±
 * 200 ms, which would make it look slower than it has to).
 */
export function redlockTarget(urls: string[], poll: PollOptions): Target {
  return {
    id: 'peer-redlock',
    label: `redlock (${urls.length} nodes)`,
    kind: 'peer',
    async start() {
      return {
        async connect(): Promise<Locker> {
          const clients = urls.map(
            (url) => new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 }),
          );
          await Promise.all(clients.map((client) => client.connect()));
          const redlock = new Redlock(clients, {
            driftFactor: 0.01,
            retryDelay: poll.pollMs,
            retryJitter: Math.floor(poll.pollMs / 2),
            automaticExtensionThreshold: 500,
          });
          // Redlock reports per-node errors as events; without a listener they would throw.
          redlock.on('error', () => {});
          return {
            async acquire(name, { ttlMs, waitMs }) {
              const lock = await redlock
                .acquire([name], ttlMs, {
                  retryCount: waitMs > 0 ? Math.ceil(waitMs / poll.pollMs) : 0,
                })
                .catch((error: unknown) => {
                  // No quorum within the retries: for a lock that others hold, that is the wait
                  // running out (node failures would look the same, but none are injected here).
                  throw error instanceof ExecutionError ? new WaitTimeout(name) : error;
                });
              return {
                async release() {
                  await lock.release();
                },
              };
            },
            async close() {
              await Promise.all(clients.map((client) => client.quit()));
            },
          };
        },
        async stop() {},
      };
    },
  };
}
