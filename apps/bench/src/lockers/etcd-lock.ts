import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { type PollOptions, peerTarget, sleep, type Target, WaitTimeout } from './locker.js';

/**
 * `etcd3`'s `Lock` (`client.lock(name).ttl(s).acquire()`), one `Etcd3` client per simulated
 * client with the library's default settings. Its `acquire` is a try-lock (a lease grant, a
 * put-if-absent transaction, and a lease revoke when that fails), so waiting is a retry every
 * `pollMs`, like the other polling peers.
 */
export function etcdLockTarget(endpoints: string[], poll: PollOptions): Target {
  return peerTarget('peer-etcd3-lock', 'etcd3 Lock', async () => {
    const client = new Etcd3({ hosts: endpoints });
    // The first call opens the gRPC channel; do it before anything is timed.
    await client.get('bench/warmup').string();
    return {
      async acquire(name, { ttlMs, waitMs }) {
        const deadline = performance.now() + waitMs;
        for (;;) {
          const lock = client.lock(name).ttl(Math.ceil(ttlMs / 1_000));
          try {
            await lock.acquire();
            return { release: () => lock.release() };
          } catch (error) {
            if (!(error instanceof EtcdLockFailedError)) throw error;
          }
          if (performance.now() + poll.pollMs > deadline) throw new WaitTimeout(name);
          await sleep(poll.pollMs);
        }
      },
      async close() {
        client.close();
      },
    };
  });
}
