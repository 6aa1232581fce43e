import { redlockBackend } from '@dlm/adapter-redlock';
import { zookeeperBackend } from '@dlm/adapter-zookeeper';
import type { LockBackend } from '@dlm/core';
import {
  type RedisService,
  redisAvailable,
  startRedisNodes,
  startZooKeeper,
  type ZooKeeperService,
  zookeeperAvailable,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serversOnOneBackend } from './servers-on-one-backend.js';

// Backends without expiry events of their own (capabilities.expiryEvents false): core checks
// each followed lease at its end, so lock.watch reports the expiry there too, on every server.

const TTL_MS = 1_000;
/** How long after the lease's end a watcher may hear of it. */
const BOUND_MS = 1_500;

interface Shared {
  start(): Promise<void>;
  backend(): Promise<LockBackend>;
  stop(): Promise<void>;
}

function zookeeper(): Shared {
  let zk: ZooKeeperService | undefined;
  return {
    start: async () => {
      zk = await startZooKeeper();
    },
    backend: async () => zookeeperBackend({ connect: zk!.connectString, sessionTimeoutMs: 4_000 }),
    stop: async () => {
      await zk?.stop();
    },
  };
}

function redlock(count: number): Shared {
  let nodes: RedisService[] = [];
  return {
    start: async () => {
      nodes = await startRedisNodes(count);
    },
    backend: async () => {
      const backend = redlockBackend({ urls: nodes.map((node) => node.url) });
      await backend.ready();
      return backend;
    },
    stop: async () => {
      await Promise.all(nodes.map((node) => node.stop(1_000)));
    },
  };
}

const cases: Array<[string, boolean, () => Shared]> = [
  ['zookeeper', zookeeperAvailable(), zookeeper],
  ['redlock (3 nodes)', redisAvailable(), () => redlock(3)],
];

for (const [label, available, make] of cases) {
  describe.skipIf(!available)(`lock.watch on ${label}, two dlm servers on one backend`, () => {
    const shared = make();
    const { server, session, close } = serversOnOneBackend(() => shared.backend());

    beforeAll(async () => {
      await shared.start();
    }, 60_000);
    afterAll(async () => {
      await close();
      await shared.stop();
    });

    it('a watcher on the other server hears the grant, then held: false within the TTL plus a small bound', async () => {
      const [granting, watching] = [await server(), await server()];
      const holder = await session(granting);
      const watcher = await session(watching);
      const local = await session(granting);
      const name = `watch-expiry/${Math.random().toString(36).slice(2)}`;
      const remoteWatch = (await watcher.call('lock.watch', { name })).result;
      const localWatch = (await local.call('lock.watch', { name })).result;
      expect(remoteWatch.held).toBe(false);
      // The dashboard's feed on the granting server, derived from the same watch.
      const dashboard = await session(granting);
      const prefixWatch = (await dashboard.call('lock.watchPrefix', { prefix: name })).result;

      const startedAt = performance.now();
      const granted = (await holder.call('lock.acquire', { name, ttlMs: TTL_MS })).result;
      for (const [peer, watch] of [
        [watcher, remoteWatch],
        [local, localWatch],
      ] as const) {
        const grant = await peer.nextNotification('lock.changed', 5_000);
        expect(grant.params).toMatchObject({
          watchId: watch.watchId,
          name,
          held: true,
          token: granted.token,
        });
      }
      for (const [peer, watch] of [
        [watcher, remoteWatch],
        [local, localWatch],
      ] as const) {
        const end = await peer.nextNotification('lock.changed', TTL_MS + BOUND_MS + 1_000);
        const heardAfterMs = performance.now() - startedAt;
        console.info(
          `${label}: the expiry of a ${TTL_MS} ms lease was heard after ${heardAfterMs.toFixed(0)} ms`,
        );
        // The wire shape of an end: no owner or token.
        expect(end.params).toEqual({ watchId: watch.watchId, name, held: false, holders: 0 });
        expect(heardAfterMs).toBeGreaterThanOrEqual(TTL_MS - 50);
        expect(heardAfterMs).toBeLessThanOrEqual(TTL_MS + BOUND_MS);
      }
      const feedEvents = [
        await dashboard.nextNotification('lock.changed', 2_000),
        await dashboard.nextNotification('lock.changed', 2_000),
      ].map((n) => n.params);
      expect(feedEvents.map((e) => [e.watchId, e.event, e.held, e.token])).toEqual([
        [prefixWatch.watchId, 'acquired', true, granted.token],
        [prefixWatch.watchId, 'expired', false, granted.token],
      ]);
      // The holder was told too, and nothing more came to the watchers.
      expect((await holder.nextNotification('lock.lost', 2_000)).params).toMatchObject({
        name,
        token: granted.token,
        reason: 'expired',
      });
      expect(watcher.notifications).toEqual([]);
      expect(local.notifications).toEqual([]);
      expect(dashboard.notifications).toEqual([]);
    }, 30_000);
  });
}
