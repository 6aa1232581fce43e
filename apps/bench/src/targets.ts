import type { LockBackend } from '@dlm/core';
import { type BackendConfig, backendArgs, createBackend, createLogger } from '@dlm/server';
import {
  type EtcdService,
  type PostgresService,
  type RedisClusterService,
  type RedisSentinelService,
  type RedisService,
  startEtcd,
  startPostgres,
  startRedis,
  startRedisCluster,
  startRedisNodes,
  startRedisSentinel,
  startZooKeeper,
  tempDir,
  type ZooKeeperService,
} from '@dlm/test-services';
import type { FloorBackend } from './floors.js';
import { dlmTarget } from './lockers/dlm.js';
import { doorTarget } from './lockers/dlm-doors.js';
import { libTarget } from './lockers/dlm-lib.js';
import { etcdLockTarget } from './lockers/etcd-lock.js';
import type { PollOptions, Target } from './lockers/locker.js';
import { pgAdvisoryTarget } from './lockers/pg-advisory.js';
import { rawRedisTarget } from './lockers/redis-raw.js';
import { redisSemaphoreTarget } from './lockers/redis-semaphore.js';
import { redlockTarget } from './lockers/redlock.js';
import { zookeeperRecipeTarget } from './lockers/zookeeper-recipe.js';
import { zookeeperReadWriteTarget } from './lockers/zookeeper-rwlock.js';

/** The real servers every target runs against, started once for the whole run. */
export interface Services {
  redis?: RedisService;
  redisNodes?: RedisService[];
  /** 3 masters + 3 replicas. */
  redisCluster?: RedisClusterService;
  /** A master, two replicas and three sentinels. */
  redisSentinel?: RedisSentinelService;
  etcd?: EtcdService;
  zookeeper?: ZooKeeperService;
  postgres?: PostgresService;
}

type Need = keyof Services;

interface TargetSpec {
  id: string;
  needs: Need[];
  /** The backend whose own plain write is this target's floor (issue 21, target 4). */
  floor?: FloorBackend;
  create(services: Required<Services>, settings: TargetSettings): Target;
}

export interface TargetSettings extends PollOptions {
  profileDir?: string | undefined;
  /** Makes keys and znodes of this run distinct from any earlier run's. */
  runId: string;
}

/** The backend a dlm target's server (or, on the library path, its process) opens. */
type ConfigOf = (services: Required<Services>) => BackendConfig;

const redisConfig: ConfigOf = (s) => ({ kind: 'redis', url: s.redis.url });
const etcdConfig: ConfigOf = (s) => ({ kind: 'etcd', endpoints: s.etcd.endpoints });
const zookeeperConfig: ConfigOf = (s) => ({
  kind: 'zookeeper',
  connect: s.zookeeper.connectString,
});

const dlm = (id: string, label: string, needs: Need[], config: ConfigOf): TargetSpec => ({
  id,
  needs,
  create: (services, settings) =>
    dlmTarget({
      id,
      label,
      backendArgs: () => backendArgs(config(services)),
      profileDir: settings.profileDir,
    }),
});

/**
 * Opens an adapter as the server would, and makes its first round trip, so that no timed call
 * opens a connection.
 */
async function opened(config: BackendConfig): Promise<LockBackend> {
  const backend = await createBackend(config, createLogger('warn'));
  await backend.inspect('bench/warmup');
  return backend;
}

const lib = (
  id: string,
  label: string,
  needs: Need[],
  config: ConfigOf,
  sharedBackend = false,
): TargetSpec => ({
  id,
  needs,
  create: (services) =>
    libTarget({ id, label, openBackend: () => opened(config(services)), sharedBackend }),
});

/** dlm-embedded-memory's server reached through another door (workload 1 only). */
const door = (
  id: string,
  label: string,
  through: Parameters<typeof doorTarget>[2],
): TargetSpec => ({
  id,
  needs: [],
  create: () => doorTarget(id, label, through),
});

/** A peer library, driven directly (its id is the one its `create` gives). */
const peer = (id: string, needs: Need[], create: TargetSpec['create']): TargetSpec => ({
  id,
  needs,
  create,
});

/** In table order: each dlm adapter (the embedded one through each door too), then the peers. */
const SPECS: TargetSpec[] = [
  dlm('dlm-embedded-memory', 'dlm embedded (memory)', [], () => ({
    kind: 'embedded',
    dataDir: null,
  })),
  door('dlm-door-rpc', 'dlm embedded (memory), POST /v1/rpc', 'rpc'),
  door('dlm-door-dapr-http', 'dlm embedded (memory), Dapr HTTP (@dapr/dapr)', 'dapr-http'),
  door('dlm-door-dapr-grpc', 'dlm embedded (memory), Dapr gRPC (@dapr/dapr)', 'dapr-grpc'),
  {
    ...dlm('dlm-embedded-disk', 'dlm embedded (data dir)', [], () => ({
      kind: 'embedded',
      dataDir: tempDir('bench-embedded'),
    })),
    floor: 'disk',
  },
  dlm('dlm-redis', 'dlm redis', ['redis'], redisConfig),
  dlm('dlm-redis-cluster', 'dlm redis cluster (3+3)', ['redisCluster'], (s) => ({
    kind: 'redis',
    cluster: s.redisCluster.addresses,
  })),
  ...([0, 1] as const).map((minReplicas) =>
    dlm(
      `dlm-redis-sentinel${minReplicas ? '-wait' : ''}`,
      `dlm redis sentinel (1 + 2 replicas${minReplicas ? ', minReplicas 1' : ''})`,
      ['redisSentinel'],
      (s) => ({
        kind: 'redis',
        sentinels: s.redisSentinel.hostPorts.split(','),
        sentinelName: s.redisSentinel.name,
        ...(minReplicas ? { minReplicas } : {}),
      }),
    ),
  ),
  dlm('dlm-redlock', 'dlm redlock (3 nodes)', ['redisNodes'], (s) => ({
    kind: 'redlock',
    urls: s.redisNodes.map((node) => node.url),
  })),
  { ...dlm('dlm-etcd', 'dlm etcd', ['etcd'], etcdConfig), floor: 'etcd' },
  { ...dlm('dlm-zookeeper', 'dlm zookeeper', ['zookeeper'], zookeeperConfig), floor: 'zookeeper' },
  dlm('dlm-postgres', 'dlm postgres', ['postgres'], (s) => ({
    kind: 'postgres',
    url: s.postgres.url,
  })),
  // The library path: core + an adapter in this process (the in-memory store is one for all
  // clients: a second process could not share it).
  lib(
    'lib-embedded',
    'dlm lib embedded (memory)',
    [],
    () => ({ kind: 'embedded', dataDir: null }),
    true,
  ),
  lib('lib-redis', 'dlm lib redis', ['redis'], redisConfig),
  { ...lib('lib-etcd', 'dlm lib etcd', ['etcd'], etcdConfig), floor: 'etcd' },
  {
    ...lib('lib-zookeeper', 'dlm lib zookeeper', ['zookeeper'], zookeeperConfig),
    floor: 'zookeeper',
  },
  peer('peer-raw-redis', ['redis'], (s, settings) => rawRedisTarget(s.redis.url, settings)),
  peer('peer-redis-semaphore', ['redis'], (s, settings) =>
    redisSemaphoreTarget(s.redis.url, settings),
  ),
  peer('peer-redlock', ['redisNodes'], (s, settings) =>
    redlockTarget(
      s.redisNodes.map((node) => node.url),
      settings,
    ),
  ),
  peer('peer-etcd3-lock', ['etcd'], (s, settings) => etcdLockTarget(s.etcd.endpoints, settings)),
  peer('peer-zk-recipe', ['zookeeper'], (s, settings) =>
    zookeeperRecipeTarget(s.zookeeper.connectString, `/bench-peer-${settings.runId}`),
  ),
  peer('peer-zk-rwlock', ['zookeeper'], (s, settings) =>
    zookeeperReadWriteTarget(s.zookeeper.connectString, `/bench-peer-rw-${settings.runId}`),
  ),
  peer('peer-pg-advisory', ['postgres'], (s) => pgAdvisoryTarget(s.postgres.url)),
];

export const TARGET_IDS: readonly string[] = SPECS.map((spec) => spec.id);

/** Which dlm adapter is compared with which peer, in table order. */
export const PAIRS: ReadonlyArray<{ dlm: string; peers: string[] }> = [
  { dlm: 'dlm-embedded-memory', peers: ['peer-raw-redis'] },
  { dlm: 'dlm-embedded-disk', peers: ['peer-raw-redis'] },
  { dlm: 'dlm-redis', peers: ['peer-raw-redis', 'peer-redis-semaphore'] },
  // Beside one Redis: what the cluster's routing and its replicas cost.
  { dlm: 'dlm-redis-cluster', peers: ['peer-raw-redis'] },
  { dlm: 'dlm-redis-sentinel', peers: ['peer-raw-redis'] },
  { dlm: 'dlm-redis-sentinel-wait', peers: ['peer-raw-redis'] },
  { dlm: 'dlm-redlock', peers: ['peer-redlock'] },
  { dlm: 'dlm-etcd', peers: ['peer-etcd3-lock'] },
  { dlm: 'dlm-zookeeper', peers: ['peer-zk-recipe'] },
  { dlm: 'dlm-postgres', peers: ['peer-pg-advisory'] },
  { dlm: 'lib-embedded', peers: ['peer-raw-redis'] },
  { dlm: 'lib-redis', peers: ['peer-raw-redis', 'peer-redis-semaphore'] },
  { dlm: 'lib-etcd', peers: ['peer-etcd3-lock'] },
  { dlm: 'lib-zookeeper', peers: ['peer-zk-recipe'] },
];

/** Which backend floor each target is held to (issue 21, target 4), by target id. */
export const FLOOR_OF: ReadonlyMap<string, FloorBackend> = new Map(
  SPECS.flatMap((spec) => (spec.floor ? [[spec.id, spec.floor] as const] : [])),
);

/** The floors to measure for the selected targets. */
export function floorsOf(specs: TargetSpec[]): FloorBackend[] {
  return [...new Set(specs.flatMap((spec) => (spec.floor ? [spec.floor] : [])))];
}

export function selectSpecs(only: string[]): TargetSpec[] {
  const unknown = only.filter((id) => !TARGET_IDS.includes(id));
  if (unknown.length)
    throw new Error(`unknown target ${unknown.join(', ')}; ids: ${TARGET_IDS.join(', ')}`);
  return only.length ? SPECS.filter((spec) => only.includes(spec.id)) : SPECS;
}

/** Starts the services the selected targets need, in parallel. */
export async function startServices(specs: TargetSpec[]): Promise<Services> {
  const needs = new Set(specs.flatMap((spec) => spec.needs));
  const [redis, redisNodes, redisCluster, redisSentinel, etcd, zookeeper, postgres] =
    await Promise.all([
      needs.has('redis') ? startRedis() : undefined,
      needs.has('redisNodes') ? startRedisNodes(3) : undefined,
      needs.has('redisCluster') ? startRedisCluster() : undefined,
      needs.has('redisSentinel') ? startRedisSentinel() : undefined,
      needs.has('etcd') ? startEtcd() : undefined,
      needs.has('zookeeper') ? startZooKeeper() : undefined,
      needs.has('postgres') ? startPostgres() : undefined,
    ]);
  return {
    ...(redis ? { redis } : {}),
    ...(redisNodes ? { redisNodes } : {}),
    ...(redisCluster ? { redisCluster } : {}),
    ...(redisSentinel ? { redisSentinel } : {}),
    ...(etcd ? { etcd } : {}),
    ...(zookeeper ? { zookeeper } : {}),
    ...(postgres ? { postgres } : {}),
  };
}

export async function stopServices(services: Services): Promise<void> {
  await Promise.allSettled([
    services.redis?.stop(),
    ...(services.redisNodes ?? []).map((node) => node.stop()),
    services.redisCluster?.stop(),
    services.redisSentinel?.stop(),
    services.etcd?.stop(),
    services.zookeeper?.stop(),
    services.postgres?.stop(),
  ]);
}

function servicePids(services: Services, needs: Need[]): number[] {
  const pids: Array<number | undefined> = [];
  for (const need of needs) {
    if (need === 'redis') pids.push(services.redis?.pid);
    if (need === 'redisNodes') pids.push(...(services.redisNodes ?? []).map((node) => node.pid));
    if (need === 'redisCluster') {
      pids.push(...(services.redisCluster?.nodes ?? []).map((node) => node.process.pid));
    }
    // The servers and the sentinels: all of the deployment's CPU.
    if (need === 'redisSentinel') {
      const deployment = services.redisSentinel;
      pids.push(...(deployment?.servers ?? []).map((server) => server.pid));
      pids.push(...(deployment?.sentinelProcesses ?? []).map((sentinel) => sentinel.pid));
    }
    if (need === 'etcd') pids.push(...(services.etcd?.members ?? []).map((m) => m.process.pid));
    // The postmaster only: each connection's backend process is its child (not counted).
    if (need === 'postgres') pids.push(services.postgres?.pid);
    if (need === 'zookeeper') {
      pids.push(...(services.zookeeper?.members ?? []).map((m) => m.process.pid));
    }
  }
  return pids.filter((pid): pid is number => pid !== undefined);
}

export function createTargets(
  specs: TargetSpec[],
  services: Services,
  settings: TargetSettings,
): Target[] {
  // Only the services a spec needs were started; it reads no others.
  return specs.map((spec) => {
    const target = spec.create(services as Required<Services>, settings);
    target.backendPids = () => servicePids(services, spec.needs);
    return target;
  });
}
