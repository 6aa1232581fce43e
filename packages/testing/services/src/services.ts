import type { EtcdOptions, EtcdService } from './etcd.js';
import * as localEtcd from './etcd.js';
import { chooseProvider, providerAvailable, providerManaged } from './provider.js';
import type { RedisOptions, RedisService } from './redis.js';
import * as localRedis from './redis.js';
import type { ZooKeeperService } from './zookeeper.js';
import * as localZooKeeper from './zookeeper.js';

/**
 * The entry points tests call. Each asks `chooseProvider` (provider.ts) where its service
 * comes from and starts it there, so a test runs unchanged against local binaries, Docker
 * containers or the user's own servers. The local starters handle both `local` and `external`
 * (they read the URL variables themselves); the container starters are loaded only when used.
 */

function unavailable(what: string): never {
  throw new Error(
    `no ${what} to test against: install it, start a Docker engine, or point the tests at one (see @dlm/test-services' README)`,
  );
}

/**
 * Whether Redis tests can run (a URL in `DLM_TEST_REDIS_URL`, redis-server on PATH, or a
 * Docker engine). With CI=true a missing one throws instead of skipping.
 */
export function redisAvailable(): boolean {
  return providerAvailable('redis');
}

/** Whether instances can be killed, paused and restarted (false against the user's Redis). */
export function redisManaged(): boolean {
  return providerManaged('redis');
}

/**
 * One Redis on a free loopback port: a redis-server process, a container, or the user's own
 * (`DLM_TEST_REDIS_URL`). Without `aof` nothing is persisted; with `aof`,
 * `appendfsync always` makes a kill -9 lose nothing that was acknowledged.
 *
 * @example
 * const redis = await startRedis();
 * afterAll(() => redis.stop());
 * const backend = redisBackend({ url: redis.url });
 */
export async function startRedis(options: RedisOptions = {}): Promise<RedisService> {
  const provider = chooseProvider('redis');
  if (provider === 'docker') {
    return (await import('./redis-container.js')).startRedisContainer(options);
  }
  if (provider === undefined) unavailable('redis-server');
  return localRedis.startRedis(options);
}

/**
 * `n` independent Redis servers (for Redlock), started in parallel. Against an external Redis
 * the "nodes" are databases 0..n-1 of that one server: fault tests must check `redisManaged()`.
 */
export async function startRedisNodes(
  n: number,
  options: RedisOptions = {},
): Promise<RedisService[]> {
  const provider = chooseProvider('redis');
  if (provider === 'docker') {
    return (await import('./redis-container.js')).startRedisContainers(n, options);
  }
  if (provider === undefined) unavailable('redis-server');
  return localRedis.startRedisNodes(n, options);
}

/**
 * Whether etcd tests can run (`DLM_TEST_ETCD_ENDPOINTS`, etcd on PATH, or a Docker engine).
 * With CI=true a missing one throws instead of skipping.
 */
export function etcdAvailable(): boolean {
  return providerAvailable('etcd');
}

/** Whether members can be killed and restarted (false against the user's own etcd). */
export function etcdManaged(): boolean {
  return providerManaged('etcd');
}

async function etcdMembers(size: number, options: EtcdOptions): Promise<EtcdService> {
  const provider = chooseProvider('etcd');
  if (provider === 'docker') {
    return (await import('./etcd-container.js')).startEtcdContainers(size, options);
  }
  if (provider === undefined) unavailable('etcd');
  return size === 1 ? localEtcd.startEtcd(options) : localEtcd.startEtcdCluster(size, options);
}

/**
 * One etcd member on free loopback ports (a process or a container), or the user's etcd from
 * `DLM_TEST_ETCD_ENDPOINTS`. Resolves once it answers `/health`.
 *
 * @example
 * const etcd = await startEtcd();
 * afterAll(() => etcd.stop());
 * const backend = etcdBackend({ endpoints: etcd.endpoints });
 */
export function startEtcd(options: EtcdOptions = {}): Promise<EtcdService> {
  return etcdMembers(1, options);
}

/**
 * A cluster of `size` members (3 by default), resolved once every member reports healthy.
 * `member.process.start()` after a kill waits for that member's `/health`, which needs a
 * quorum: when a majority was killed, start them again together (`Promise.all`).
 */
export function startEtcdCluster(size = 3, options: EtcdOptions = {}): Promise<EtcdService> {
  return etcdMembers(size, options);
}

/**
 * Whether ZooKeeper tests can run (`DLM_TEST_ZK_CONNECT`, java and Debian's ZooKeeper jars,
 * or a Docker engine). With CI=true a missing one throws instead of skipping.
 */
export function zookeeperAvailable(): boolean {
  return providerAvailable('zookeeper');
}

/** Whether members can be killed and restarted (false against the user's own ZooKeeper). */
export function zookeeperManaged(): boolean {
  return providerManaged('zookeeper');
}

async function zookeeperMembers(size: number): Promise<ZooKeeperService> {
  const provider = chooseProvider('zookeeper');
  if (provider === 'docker') {
    return (await import('./zookeeper-container.js')).startZooKeeperContainers(size);
  }
  if (provider === undefined) unavailable('ZooKeeper');
  return size === 1 ? localZooKeeper.startZooKeeper() : localZooKeeper.startZooKeeperEnsemble(size);
}

/**
 * One standalone ZooKeeper (tickTime=200) on a free loopback port (a JVM or a container), or
 * the user's from `DLM_TEST_ZK_CONNECT`. Resolves once it serves (`srvr` says standalone).
 */
export function startZooKeeper(): Promise<ZooKeeperService> {
  return zookeeperMembers(1);
}

/**
 * An ensemble of `size` members (3 by default), resolved once every member is leader or
 * follower. After a kill, `member.process.start()` waits for that member to rejoin a quorum.
 */
export function startZooKeeperEnsemble(size = 3): Promise<ZooKeeperService> {
  return zookeeperMembers(size);
}
