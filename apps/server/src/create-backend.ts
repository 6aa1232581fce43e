import type { Clock, LockBackend } from '@dlm/core';
import type { BackendConfig } from './config.js';
import type { Logger } from './logger.js';

export interface CreateBackendOptions {
  /**
   * The lock service's clock, for the adapters that keep time themselves (embedded leases, the
   * Redis adapters' own deadlines). Default: the system clock.
   */
  clock?: Clock;
}

/**
 * Opens the configured backend. Adapters are imported on demand, so a server on the embedded
 * backend never loads ioredis, etcd3, the ZooKeeper client or pg.
 */
export async function createBackend(
  config: BackendConfig,
  logger: Logger,
  options: CreateBackendOptions = {},
): Promise<LockBackend> {
  const clock = options.clock ? { clock: options.clock } : {};
  // Capabilities some adapters learn on connecting (Redis expiry events) are final once they
  // are ready, and core reads them once. A backend that is down now is not fatal: requests
  // answer UNAVAILABLE until it is back, and the server's health check logs the outage (and
  // its end) and keeps /readyz at 503 meanwhile.
  const notReady = () => {};
  switch (config.kind) {
    case 'embedded': {
      const { embeddedBackend } = await import('@dlm/adapter-embedded');
      return embeddedBackend({
        ...clock,
        ...(config.dataDir === null ? {} : { dataDir: config.dataDir }),
        logger: (line: string) => logger.warn(line, { component: 'embedded' }),
      });
    }
    case 'redis': {
      const { redisBackend, redisClusterBackend } = await import('@dlm/adapter-redis');
      const durable = config.durable ?? false;
      const replicas = {
        ...(config.minReplicas === undefined ? {} : { minReplicas: config.minReplicas }),
        ...(config.replicaTimeoutMs === undefined
          ? {}
          : { replicaTimeoutMs: config.replicaTimeoutMs }),
      };
      const backend = config.cluster
        ? redisClusterBackend({ nodes: config.cluster, durable, ...replicas, ...clock })
        : redisBackend({
            ...(config.url === undefined ? {} : { url: config.url }),
            ...(config.sentinels ? { sentinels: config.sentinels } : {}),
            ...(config.sentinelName === undefined ? {} : { sentinelName: config.sentinelName }),
            ...replicas,
            durable,
            ...clock,
          });
      // Without known expiry events core checks each lease at its deadline.
      await backend.ready().catch(notReady);
      return backend;
    }
    case 'redlock': {
      const { redlockBackend } = await import('@dlm/adapter-redlock');
      const backend = redlockBackend({ urls: config.urls, ...clock });
      await backend.ready().catch(notReady);
      return backend;
    }
    case 'etcd': {
      const { etcdBackend } = await import('@dlm/adapter-etcd');
      return etcdBackend({ endpoints: config.endpoints });
    }
    case 'zookeeper': {
      const { zookeeperBackend } = await import('@dlm/adapter-zookeeper');
      return zookeeperBackend({ connect: config.connect });
    }
    case 'postgres': {
      const { postgresBackend } = await import('@dlm/adapter-postgres');
      const backend = postgresBackend({ url: config.url, ...clock });
      // The schema and the LISTEN connection; until they are there requests wait or fail.
      await backend.ready().catch(notReady);
      return backend;
    }
  }
}

/** A URL with its password hidden, for the log. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.password) return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

export function describeBackend(config: BackendConfig): Record<string, unknown> {
  switch (config.kind) {
    case 'embedded':
      return { backend: 'embedded', dataDir: config.dataDir ?? '(memory only)' };
    case 'redis':
      return {
        backend: 'redis',
        ...(config.cluster ? { redisCluster: config.cluster } : {}),
        ...(config.url === undefined ? {} : { redisUrl: redact(config.url) }),
        ...(config.sentinels
          ? { redisSentinels: config.sentinels, redisSentinelName: config.sentinelName }
          : {}),
        ...(config.minReplicas ? { minReplicas: config.minReplicas } : {}),
        durable: config.durable ?? false,
      };
    case 'redlock':
      return { backend: 'redlock', redlockUrls: config.urls.map(redact) };
    case 'etcd':
      return { backend: 'etcd', endpoints: config.endpoints };
    case 'zookeeper':
      return { backend: 'zookeeper', connect: config.connect };
    case 'postgres':
      return { backend: 'postgres', postgresUrl: redact(config.url) };
  }
}
