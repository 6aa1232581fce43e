import { startContainer } from './container-process.js';
import { freePort } from './process.js';
import { pingRedis, type RedisOptions, type RedisService } from './redis.js';

/**
 * redis-server in a container (the `docker` provider of `startRedis`). The command is
 * `redis-server …`, which the official image's entrypoint passes through (dropping to its
 * redis user) and which the locally built dlm-test/redis:local image runs directly.
 */

export const REDIS_IMAGE_ENV = 'DLM_TEST_REDIS_IMAGE';

export function redisImage(): string {
  return process.env[REDIS_IMAGE_ENV]?.trim() || 'redis:7';
}

/** One redis-server container on a free loopback port of the host network. */
export async function startRedisContainer(options: RedisOptions = {}): Promise<RedisService> {
  const port = await freePort();
  const host = '127.0.0.1';
  const managed = await startContainer({
    name: `redis-server:${port} (docker)`,
    image: redisImage(),
    command: [
      'redis-server',
      '--port',
      String(port),
      '--bind',
      host,
      '--save',
      '',
      '--appendonly',
      options.aof ? 'yes' : 'no',
      '--appendfsync',
      'always',
      '--dir',
      '/data',
      ...(options.args ?? []),
    ],
    ready: () => pingRedis(host, port),
  });
  // Spread would copy the getters' current values: forward them instead.
  return {
    name: managed.name,
    pid: undefined,
    get running() {
      return managed.running;
    },
    output: () => managed.output(),
    kill: () => managed.kill(),
    stop: (graceMs?: number) => managed.stop(graceMs),
    pause: () => managed.pause(),
    resume: () => managed.resume(),
    start: () => managed.start(),
    url: `redis://${host}:${port}`,
    host,
    port,
    // The data (AOF) lives in the container's /data, not on the host.
    dir: '',
    external: false,
  };
}

/** `n` independent redis-server containers (for Redlock), started in parallel. */
export async function startRedisContainers(
  n: number,
  options: RedisOptions = {},
): Promise<RedisService[]> {
  const started = await Promise.allSettled(
    Array.from({ length: n }, () => startRedisContainer(options)),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await Promise.all(nodes.map((node) => node.stop(0)));
    throw failed.reason;
  }
  return nodes;
}
