import { type RedisService, redisAvailable, startRedis } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedHset } from '../src/index.js';
import { lockName, staleHolderAndNewHolder, startLockServer } from './stale-holder.js';

const enabled = redisAvailable();

describe.skipIf(!enabled)(
  'Redis: a Lua script that writes only for a token that is not stale',
  () => {
    let service: RedisService;
    let redis: Redis;
    let locks: Awaited<ReturnType<typeof startLockServer>>;

    beforeAll(async () => {
      [service, locks] = await Promise.all([startRedis(), startLockServer()]);
      redis = new Redis(service.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
    });
    afterAll(async () => {
      redis?.disconnect();
      await locks?.close();
      await service?.stop();
    });

    it("refuses a stale holder's write after a newer holder wrote, with the server's real tokens", async () => {
      const name = lockName('redis');
      const { stale, current } = await staleHolderAndNewHolder(locks.a, locks.b, name);

      expect(await fencedHset(redis, name, current.token, { owner: 'B', items: '3' })).toEqual({
        written: true,
        highest: current.token,
      });
      // A wakes from its pause and writes: refused, and told which token beat it.
      expect(await fencedHset(redis, name, stale.token, { owner: 'A', items: '99' })).toEqual({
        written: false,
        highest: current.token,
      });
      expect(await redis.hgetall(name)).toEqual({
        owner: 'B',
        items: '3',
        fence_token: current.token.toString(),
      });
      // The same holder writing again is accepted.
      expect((await fencedHset(redis, name, current.token, { items: '4' })).written).toBe(true);
      expect(await redis.hget(name, 'items')).toBe('4');
      await current.release();
    });

    it('without the script the stale write lands (the failure the recipe prevents)', async () => {
      const name = lockName('redis-unfenced');
      const { stale, current } = await staleHolderAndNewHolder(locks.a, locks.b, name);
      await redis.hset(name, { owner: 'B' });
      await redis.hset(name, { owner: 'A' });
      expect(await redis.hget(name, 'owner')).toBe('A');
      expect(stale.token).toBeLessThan(current.token);
      await current.release();
    });

    it('compares tokens as 64-bit integers (beyond 2^53, and by length before digits)', async () => {
      const name = lockName('redis-big');
      const big = 2n ** 62n + 1n;
      expect((await fencedHset(redis, name, big, { v: 'big' })).written).toBe(true);
      // Doubles would see these as equal to `big`.
      expect((await fencedHset(redis, name, big - 1n, { v: 'less' })).written).toBe(false);
      const other = lockName('redis-length');
      expect((await fencedHset(redis, other, 10n, { v: '10' })).written).toBe(true);
      // "9" > "10" as strings; as tokens it is older.
      expect((await fencedHset(redis, other, 9n, { v: '9' })).written).toBe(false);
      await expect(redis.eval('return 1', 0)).resolves.toBe(1);
      await expect(
        fencedHset(redis, other, 0n, { v: 'zero' }).catch((error: Error) => error.message),
      ).resolves.toMatch(/fencing token must be/);
    });
  },
);
