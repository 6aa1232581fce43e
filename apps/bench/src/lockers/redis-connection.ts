import { Redis } from 'ioredis';

/**
 * One connected ioredis client as the Redis peers use it: one attempt per command, so an
 * unreachable Redis fails the operation instead of queueing it.
 */
export async function connectRedis(url: string): Promise<Redis> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  return redis;
}
