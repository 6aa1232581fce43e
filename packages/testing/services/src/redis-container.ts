import { serviceImage, startContainer } from './container-process.js';
import { allStarted, freePort } from './process.js';
import {
  pingRedis,
  type RedisOptions,
  type RedisService,
  redisServerArgs,
  redisService,
} from './redis.js';

/**
 * redis-server in a container (the `docker` provider of `startRedis`). The command is
 * `redis-server …`, which the official image's entrypoint passes through (dropping to its
 * redis user) and which the locally built dlm-test/redis:local image runs directly.
 */

/** One redis-server container on a free loopback port of the host network. */
export async function startRedisContainer(options: RedisOptions = {}): Promise<RedisService> {
  const port = await freePort();
  const host = '127.0.0.1';
  const managed = await startContainer({
    name: `redis-server:${port} (docker)`,
    image: serviceImage('redis'),
    command: ['redis-server', ...redisServerArgs(host, port, '/data', options)],
    ready: () => pingRedis(host, port),
  });
  // The data (AOF) lives in the container's /data, not on the host.
  return redisService(managed, host, port, '');
}

/** `n` independent redis-server containers (for Redlock), started in parallel. */
export async function startRedisContainers(
  n: number,
  options: RedisOptions = {},
): Promise<RedisService[]> {
  return allStarted(
    Array.from({ length: n }, () => startRedisContainer(options)),
    (node) => node.stop(0),
  );
}
