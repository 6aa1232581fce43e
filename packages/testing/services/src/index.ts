export { type BreakableKind, breakable } from './breakable.js';
export {
  type ContainerProcess,
  type ContainerSpec,
  startContainer,
} from './container-process.js';
export type {
  EtcdMember,
  EtcdOptions,
  EtcdService,
} from './etcd.js';
export { type FaultScope, faultScope, type PausableService } from './fault-scope.js';
export { portOpen } from './port-open.js';
export {
  type PostgresService,
  pingPostgres,
  postgresAvailable,
  postgresBinDir,
  postgresManaged,
  startPostgres,
} from './postgres.js';
export {
  findBinary,
  freePort,
  type ManagedProcess,
  type ProcessSpec,
  serviceAvailable,
  startProcess,
  tempDir,
} from './process.js';
export {
  chooseProvider,
  dockerAvailable,
  PROVIDER_ENV,
  type ServiceKind,
  type ServiceProvider,
} from './provider.js';
export { pingRedis, type RedisOptions, type RedisService } from './redis.js';
export {
  type RedisClusterNode,
  type RedisClusterNodeInfo,
  type RedisClusterOptions,
  type RedisClusterService,
  redisCli,
  redisClusterAvailable,
  type SlotMigration,
  startRedisCluster,
} from './redis-cluster.js';
export {
  type RedisSentinelOptions,
  type RedisSentinelService,
  redisQuery,
  redisSentinelAvailable,
  redisSentinelManaged,
  type SentinelAddress,
  startRedisSentinel,
} from './redis-sentinel.js';
export {
  etcdAvailable,
  etcdManaged,
  redisAvailable,
  redisManaged,
  startEtcd,
  startEtcdCluster,
  startRedis,
  startRedisNodes,
  startZooKeeper,
  startZooKeeperEnsemble,
  zookeeperAvailable,
  zookeeperManaged,
} from './services.js';
export {
  fourLetterWord,
  type ZooKeeperMember,
  type ZooKeeperService,
  zookeeperMode,
} from './zookeeper.js';
