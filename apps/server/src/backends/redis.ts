import { parseInteger, UsageError } from '@dlm/flags';
import { defineKind, optionalArg, redact, whenReady } from '../backend-kind.js';
import { hostPortsSetting, listSetting, type Sources } from '../config-sources.js';

export interface RedisSettings {
  /** The server; with `sentinels` only its password and database; absent with `cluster`. */
  url?: string;
  durable?: boolean;
  /** Redis Cluster: `host:port` of some of its nodes (the rest are discovered). */
  cluster?: string[];
  /** Redis Sentinel: `host:port` of each sentinel, and the master's name they monitor. */
  sentinels?: string[];
  sentinelName?: string;
  /** Replicas that must confirm (WAIT) each write, and how long WAIT waits (ms). */
  minReplicas?: number;
  replicaTimeoutMs?: number;
}

/** What every Redis deployment takes: durability and the replicas to wait for. */
function commonSettings(
  from: Sources,
): Pick<RedisSettings, 'durable' | 'minReplicas' | 'replicaTimeoutMs'> {
  const minReplicas = from.setting('redis-min-replicas');
  const replicaTimeout = from.setting('redis-replica-timeout-ms');
  return {
    durable: from.on('redis-durable'),
    ...(minReplicas === undefined
      ? {}
      : { minReplicas: parseInteger(minReplicas, '--redis-min-replicas', { min: 0 }) }),
    ...(replicaTimeout === undefined
      ? {}
      : { replicaTimeoutMs: parseInteger(replicaTimeout, '--redis-replica-timeout-ms') }),
  };
}

/** `--backend redis`: one server by URL, the master that Sentinel names, or a Cluster. */
function parseRedis(from: Sources): RedisSettings {
  const { flag, setting } = from;
  const common = commonSettings(from);
  const url = () => listSetting(from, 'redis-url')[0]!;
  if (setting('redis-cluster') !== undefined) {
    if (flag('redis-url') !== undefined)
      throw new UsageError('--redis-url and --redis-cluster exclude each other');
    if (setting('redis-sentinels') !== undefined)
      throw new UsageError('--redis-sentinels and --redis-cluster exclude each other');
    return { cluster: hostPortsSetting(from, 'redis-cluster'), ...common };
  }
  if (setting('redis-sentinels') === undefined) {
    if (flag('redis-sentinel-name') !== undefined)
      throw new UsageError('--redis-sentinel-name needs --redis-sentinels');
    return { url: url(), ...common };
  }
  const sentinels = hostPortsSetting(from, 'redis-sentinels');
  const sentinelName = setting('redis-sentinel-name');
  if (!sentinelName)
    throw new UsageError('--redis-sentinel-name is required with --redis-sentinels');
  return {
    sentinels,
    sentinelName,
    ...(setting('redis-url') === undefined ? {} : { url: url() }),
    ...common,
  };
}

export const redis = defineKind('redis', {
  flags: {
    'redis-url': 'string',
    'redis-durable': 'boolean',
    'redis-cluster': 'string',
    'redis-sentinels': 'string',
    'redis-sentinel-name': 'string',
    'redis-min-replicas': 'string',
    'redis-replica-timeout-ms': 'string',
  },
  help: `  --redis-url URL          redis: e.g. redis://127.0.0.1:6379 (DLM_REDIS_URL)
  --redis-durable          redis: it runs with appendonly yes + appendfsync always, so locks and
                           fencing tokens survive its restart (DLM_REDIS_DURABLE=1)
  --redis-cluster H:P,H:P  redis: a Redis Cluster, by some of its nodes, instead of --redis-url
                           (DLM_REDIS_CLUSTER)
  --redis-sentinels H:P,H:P  redis: ask these sentinels for the master instead of --redis-url
                           (DLM_REDIS_SENTINELS), with --redis-sentinel-name NAME: the master
                           they monitor (DLM_REDIS_SENTINEL_NAME)
  --redis-min-replicas N   redis: report a grant, extend or release only once N replicas have it
                           (WAIT), else UNAVAILABLE (DLM_REDIS_MIN_REPLICAS, default 0)
  --redis-replica-timeout-ms N  redis: how long WAIT waits for them
                           (DLM_REDIS_REPLICA_TIMEOUT_MS, default 500)`,
  parse: parseRedis,
  async open(config, { clock }) {
    const { redisBackend, redisClusterBackend } = await import('@dlm/adapter-redis');
    const common = {
      durable: config.durable ?? false,
      ...(config.minReplicas === undefined ? {} : { minReplicas: config.minReplicas }),
      ...(config.replicaTimeoutMs === undefined
        ? {}
        : { replicaTimeoutMs: config.replicaTimeoutMs }),
      ...(clock ? { clock } : {}),
    };
    // Without known expiry events core checks each lease at its deadline.
    return whenReady(
      config.cluster
        ? redisClusterBackend({ nodes: config.cluster, ...common })
        : redisBackend(
            Object.assign(
              {},
              config.url === undefined ? {} : { url: config.url },
              config.sentinels ? { sentinels: config.sentinels } : {},
              config.sentinelName === undefined ? {} : { sentinelName: config.sentinelName },
              common,
            ),
          ),
    );
  },
  describe: (config) => ({
    backend: 'redis',
    ...(config.cluster ? { redisCluster: config.cluster } : {}),
    ...(config.url === undefined ? {} : { redisUrl: redact(config.url) }),
    ...(config.sentinels
      ? { redisSentinels: config.sentinels, redisSentinelName: config.sentinelName }
      : {}),
    ...(config.minReplicas ? { minReplicas: config.minReplicas } : {}),
    durable: config.durable ?? false,
  }),
  args: (config) => [
    '--backend',
    'redis',
    ...optionalArg('redis-url', config.url),
    ...optionalArg('redis-cluster', config.cluster?.join(',')),
    ...optionalArg('redis-sentinels', config.sentinels?.join(',')),
    ...optionalArg('redis-sentinel-name', config.sentinelName),
    ...(config.durable ? ['--redis-durable'] : []),
    ...optionalArg('redis-min-replicas', config.minReplicas),
    ...optionalArg('redis-replica-timeout-ms', config.replicaTimeoutMs),
  ],
});
