import { redisBackend } from '@dlm/adapter-redis';
import { type RedisService, redisAvailable, startRedis } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serversOnOneBackend } from './servers-on-one-backend.js';
import type { Peer } from './ws-peer.js';

// Who am I waiting behind, over the wire, across two dlm servers on one Redis (a backend with a
// shared queue it counts): lock.get counts the other server's waiters (waitersScope "backend"),
// and lock.queued places count them too, moving up when a waiter on the other server leaves.
// The conformance group checks the same through core on every such backend.

describe.skipIf(!redisAvailable())(
  'waiters across servers on one Redis (lock.get, lock.queued)',
  () => {
    let redis: RedisService;
    const { server, session, close } = serversOnOneBackend(() => redisBackend({ url: redis.url }));

    /** The positions `peer` was told, in order. */
    const told = (peer: Peer) =>
      peer.notifications.filter((n) => n.method === 'lock.queued').map((n) => n.params.position);

    beforeAll(async () => {
      redis = await startRedis();
    }, 60_000);
    afterAll(async () => {
      await close();
      await redis?.stop(1_000);
    });

    it("each server counts and places the other's waiters", async () => {
      const [one, two] = [await server(), await server()];
      const [holder, first, second] = [await session(one), await session(one), await session(two)];
      const name = `waiters-across/${Math.random().toString(36).slice(2)}`;
      const held = (await holder.call('lock.acquire', { name, ttlMs: 10_000 })).result;
      /** `peer` queues for the name, told its places, until it is told the first one. */
      const queue = async (peer: Peer, waitMs: number) => {
        const wait = peer.call('lock.acquire', { name, ttlMs: 10_000, waitMs, progress: true });
        await peer.arrived(() => (told(peer).length === 1 ? true : undefined));
        return { wait };
      };
      // The first gives up when its waitMs runs out (on server one); the second waits on two.
      const { wait: firstWait } = await queue(first, 1_500);
      const { wait: secondWait } = await queue(second, 20_000);
      expect(told(second)).toEqual([2]);
      for (const peer of [holder, second]) {
        expect((await peer.call('lock.get', { name })).result).toMatchObject({
          held: true,
          waiters: 2,
          waitersScope: 'backend',
        });
      }
      // The admin API's one lock is lock.get's view, on either server.
      for (const on of [one, two]) {
        const admin = await fetch(`${on.httpUrl}/v1/locks/${encodeURIComponent(name)}`);
        expect(await admin.json()).toMatchObject({
          held: true,
          token: held.token,
          waiters: 2,
          waitersScope: 'backend',
        });
      }
      expect((await firstWait).error).toMatchObject({ code: expect.any(Number) });
      // Server two hears of the departure on server one from Redis, and tells its waiter.
      await second.arrived(() => (told(second).length === 2 ? true : undefined), 5_000);
      expect((await holder.call('lock.get', { name })).result).toMatchObject({ waiters: 1 });
      await holder.call('lock.release', { name, token: held.token, leaseKey: held.leaseKey });
      const granted = (await secondWait).result;
      expect(granted).toMatchObject({ name });
      expect(told(first)).toEqual([1]);
      expect(told(second)).toEqual([2, 1]);
      expect((await second.call('lock.get', { name })).result).toMatchObject({
        waiters: 0,
        waitersScope: 'backend',
      });
    });
  },
);
