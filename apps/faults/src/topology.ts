import { nameKeys } from '@dlm/adapter-redis';
import { backendArgs } from '@dlm/server';
import {
  freePort,
  type ManagedProcess,
  redisQuery,
  startEtcdCluster,
  startPostgres,
  startRedis,
  startRedisCluster,
  startRedisNodes,
  startRedisSentinel,
  startZooKeeperEnsemble,
  tempDir,
} from '@dlm/test-services';
import { createTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { createWallClockOffset, type WallClockOffset, wallClockShim } from './wall-clock-shim.js';

/** The backends the harness runs against; Redis twice, with and without its AOF. */
export const BACKENDS = [
  'embedded',
  'redis',
  'redis-noaof',
  'redlock',
  'redis-cluster',
  'redis-cluster-wait',
  'etcd',
  'zookeeper',
  'postgres',
  'redis-sentinel',
  'redis-sentinel-wait',
] as const;
export type BackendVariant = (typeof BACKENDS)[number];

export function isBackendVariant(text: string): text is BackendVariant {
  return (BACKENDS as readonly string[]).includes(text);
}

/** A backend process the nemesis can kill or pause. */
export interface Member {
  /** `redis`, `r2` (a Redlock node), `n1` (etcd), `zk3`, `postgres`. */
  id: string;
  process: ManagedProcess;
}

/**
 * The backend side of a run: the backend's processes, and one TCP proxy per member between
 * the dlm server and it, which the network nemeses act on.
 */
export interface Topology {
  variant: BackendVariant;
  /** Flags for the dlm server: the backend, pointed at the proxies. */
  serverArgs: string[];
  members: Member[];
  proxies: TcpProxy[];
  /** Redis and Redlock, when a C compiler built the shim: the Redis servers' wall clock. */
  wallClock?: WallClockOffset;
  /** The member leading now (etcd, ZooKeeper), if any answers. */
  leader(): Promise<Member | undefined>;
  /**
   * Redis Sentinel: points every replica at a port where nothing listens (`REPLICAOF`), so the
   * master's next writes reach none of them (a replication link that broke; dropping the
   * connection would not do, a replica reconnects within 100 ms). The sentinels set them right
   * again after the failover.
   */
  detachReplicas?(): Promise<void>;
  /** Resolves once the backend serves again after a member restart (a leader elected). */
  settled(): Promise<void>;
  /** Redis Cluster: the master holding `lockName`'s keys now. */
  masterOf?(lockName: string): Promise<Member>;
  stop(): Promise<void>;
}

async function proxiesFor(ports: number[]): Promise<TcpProxy[]> {
  return Promise.all(ports.map((targetPort) => createTcpProxy({ targetPort })));
}

const portOf = (url: string) => Number(new URL(url).port);

/** A movable wall clock for the Redis servers, when the shim can be built here. */
function redisWallClock(): WallClockOffset | undefined {
  const shim = wallClockShim();
  return shim ? createWallClockOffset(shim) : undefined;
}

const none = async () => undefined;
const nothing = async () => {};

/** Closes the backend's proxies, then stops the backend itself. */
async function stopBehind(proxies: TcpProxy[], stopBackend: () => Promise<unknown>): Promise<void> {
  await Promise.all(proxies.map((proxy) => proxy.close()));
  await stopBackend();
}

/** A backend with no leader (one Redis, Redlock's nodes, PostgreSQL): nothing to settle. */
function leaderless(
  proxies: TcpProxy[],
  stopBackend: () => Promise<unknown>,
): Pick<Topology, 'leader' | 'settled' | 'stop'> {
  return { leader: none, settled: nothing, stop: () => stopBehind(proxies, stopBackend) };
}

/** The embedded backend: a data dir of its own, nothing to proxy. */
async function embeddedTopology(): Promise<Topology> {
  const variant = 'embedded';
  const dataDir = tempDir('faults-embedded');
  return {
    variant,
    serverArgs: backendArgs({ kind: 'embedded', dataDir }),
    members: [],
    proxies: [],
    leader: none,
    settled: nothing,
    stop: nothing,
  };
}

/** One redis-server, with AOF (`redis`) or without (`redis-noaof`). */
async function redisTopology(variant: 'redis' | 'redis-noaof'): Promise<Topology> {
  const wallClock = redisWallClock();
  const redis = await startRedis({
    aof: variant === 'redis',
    ...(wallClock ? { env: wallClock.env } : {}),
  });
  const proxies = await proxiesFor([redis.port]);
  return {
    variant,
    serverArgs: backendArgs({
      kind: 'redis',
      url: `redis://127.0.0.1:${proxies[0]!.port}`,
      // AOF with appendfsync always: the server may declare it durable.
      durable: variant === 'redis',
    }),
    members: [{ id: 'redis', process: redis }],
    proxies,
    ...(wallClock ? { wallClock } : {}),
    ...leaderless(proxies, () => redis.kill()),
  };
}

/** Three independent Redis nodes for Redlock. */
async function redlockTopology(): Promise<Topology> {
  const variant = 'redlock';
  const wallClock = redisWallClock();
  const nodes = await startRedisNodes(3, wallClock ? { env: wallClock.env } : {});
  const proxies = await proxiesFor(nodes.map((node) => node.port));
  return {
    variant,
    serverArgs: backendArgs({
      kind: 'redlock',
      urls: proxies.map((proxy) => `redis://127.0.0.1:${proxy.port}`),
    }),
    members: nodes.map((node, i) => ({ id: `r${i + 1}`, process: node })),
    proxies,
    ...(wallClock ? { wallClock } : {}),
    ...leaderless(proxies, () => Promise.all(nodes.map((node) => node.kill()))),
  };
}

/** What a 3-member consensus cluster (etcd, ZooKeeper) gives its topology. */
interface ClusterTopologyOptions {
  variant: BackendVariant;
  serverArgs: string[];
  members: Member[];
  proxies: TcpProxy[];
  cluster: { waitForLeader(timeoutMs: number): Promise<unknown>; stop(): Promise<void> };
  /** The leading member's id, as `members` names it (undefined or unmatched: none leads). */
  leaderId(): Promise<string | undefined>;
  /** How long a restarted member may take until a leader is elected again. */
  settleMs: number;
}

function clusterTopology(options: ClusterTopologyOptions): Topology {
  const { variant, serverArgs, members, proxies, cluster } = options;
  return {
    variant,
    serverArgs,
    members,
    proxies,
    async leader() {
      const id = await options.leaderId();
      return members.find((member) => member.id === id);
    },
    async settled() {
      await cluster.waitForLeader(options.settleMs);
    },
    stop: () => stopBehind(proxies, () => cluster.stop()),
  };
}

/** A 3-member etcd cluster. */
async function etcdTopology(): Promise<Topology> {
  const variant = 'etcd';
  const etcd = await startEtcdCluster(3);
  const proxies = await proxiesFor(etcd.members.map((member) => portOf(member.clientUrl)));
  const members = etcd.members.map((member) => ({ id: member.name, process: member.process }));
  return clusterTopology({
    variant,
    serverArgs: backendArgs({
      kind: 'etcd',
      endpoints: proxies.map((proxy) => `http://127.0.0.1:${proxy.port}`),
    }),
    members,
    proxies,
    cluster: etcd,
    leaderId: async () => (await etcd.leader())?.name,
    settleMs: 30_000,
  });
}

/** A 3-member ZooKeeper ensemble. */
async function zookeeperTopology(): Promise<Topology> {
  const variant = 'zookeeper';
  const zk = await startZooKeeperEnsemble(3);
  const proxies = await proxiesFor(zk.members.map((member) => member.clientPort));
  const members = zk.members.map((member) => ({
    id: `zk${member.id}`,
    process: member.process,
  }));
  return clusterTopology({
    variant,
    serverArgs: backendArgs({
      kind: 'zookeeper',
      connect: proxies.map((proxy) => `127.0.0.1:${proxy.port}`).join(','),
    }),
    members,
    proxies,
    cluster: zk,
    leaderId: async () => `zk${(await zk.leader())?.id}`,
    settleMs: 60_000,
  });
}

/** One PostgreSQL. */
async function postgresTopology(): Promise<Topology> {
  const variant = 'postgres';
  const postgres = await startPostgres();
  const proxies = await proxiesFor([postgres.port]);
  const url = new URL(postgres.url);
  url.port = String(proxies[0]!.port);
  return {
    variant,
    serverArgs: backendArgs({ kind: 'postgres', url: url.href }),
    members: [{ id: 'postgres', process: postgres }],
    proxies,
    ...leaderless(proxies, () => postgres.kill()),
  };
}

/**
 * A Redis Cluster, 3 masters + 3 replicas, without AOF. No proxies: a cluster client connects to
 * the addresses the nodes advertise, so the network nemeses do not apply to it.
 * `redis-cluster-wait` has the server wait for one replica (`--redis-min-replicas 1`).
 */
async function redisClusterTopology(
  variant: 'redis-cluster' | 'redis-cluster-wait',
): Promise<Topology> {
  const cluster = await startRedisCluster();
  const members = cluster.nodes.map((node) => ({ id: `c${node.port}`, process: node.process }));
  return {
    variant,
    serverArgs: backendArgs({
      kind: 'redis',
      cluster: cluster.addresses,
      ...(variant === 'redis-cluster-wait' ? { minReplicas: 1 } : {}),
    }),
    members,
    proxies: [],
    leader: none,
    // Every slot served by a running master again (a replica promoted, a restarted node rejoined).
    settled: () => cluster.waitUntilOk(60_000, false),
    async masterOf(lockName) {
      const master = await cluster.masterOf(await cluster.slotOf(nameKeys('dlm:', lockName).lock));
      return members.find((member) => member.process === master.process)!;
    },
    stop: () => cluster.stop(),
  };
}

/**
 * Redis Sentinel: a master, two replicas and three sentinels, without AOF (a failover, not a
 * restart, is what keeps the data). `redis-sentinel-wait` has the server wait for one replica
 * (`--redis-min-replicas 1`). No proxies: the sentinels hand out the servers' own addresses,
 * so the link faults do not apply; `leader()` is the master the sentinels name.
 */
async function sentinelTopology(
  variant: 'redis-sentinel' | 'redis-sentinel-wait',
): Promise<Topology> {
  const sentinel = await startRedisSentinel();
  const members = sentinel.servers.map((server, i) => ({ id: `redis${i + 1}`, process: server }));
  const memberAt = (port: number) => members[sentinel.servers.findIndex((s) => s.port === port)];
  return {
    variant,
    serverArgs: backendArgs({
      kind: 'redis',
      sentinels: sentinel.hostPorts.split(','),
      sentinelName: sentinel.name,
      ...(variant === 'redis-sentinel-wait' ? { minReplicas: 1 } : {}),
    }),
    members,
    proxies: [],
    async leader() {
      return memberAt((await sentinel.master().catch(() => undefined))?.port ?? -1);
    },
    // One master for every name.
    async masterOf() {
      const master = memberAt((await sentinel.master()).port);
      if (!master) throw new Error('the sentinels name no master of ours');
      return master;
    },
    async settled() {
      await sentinel.master(30_000);
    },
    async detachReplicas() {
      const master = await sentinel.master();
      const nowhere = await freePort();
      const replicas = sentinel.servers.filter((server) => server.port !== master.port);
      for (const replica of replicas) {
        const reply = await redisQuery(replica, `REPLICAOF 127.0.0.1 ${nowhere}`);
        if (!reply?.startsWith('+OK')) throw new Error(`REPLICAOF on ${replica.port}: ${reply}`);
      }
    },
    stop: () => sentinel.stop(),
  };
}

/** Starts the backend's processes (a 3-member cluster for etcd and ZooKeeper, 3 Redlock nodes). */
export function startTopology(variant: BackendVariant): Promise<Topology> {
  switch (variant) {
    case 'embedded':
      return embeddedTopology();
    case 'redis':
    case 'redis-noaof':
      return redisTopology(variant);
    case 'redlock':
      return redlockTopology();
    case 'redis-cluster':
    case 'redis-cluster-wait':
      return redisClusterTopology(variant);
    case 'etcd':
      return etcdTopology();
    case 'zookeeper':
      return zookeeperTopology();
    case 'postgres':
      return postgresTopology();
    case 'redis-sentinel':
    case 'redis-sentinel-wait':
      return sentinelTopology(variant);
  }
}
