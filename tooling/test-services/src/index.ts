export {
  type EtcdMember,
  type EtcdOptions,
  type EtcdService,
  etcdAvailable,
  etcdManaged,
  startEtcd,
  startEtcdCluster,
} from './etcd.js';
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
  pingRedis,
  type RedisOptions,
  type RedisService,
  redisAvailable,
  redisManaged,
  startRedis,
  startRedisNodes,
} from './redis.js';
export {
  fourLetterWord,
  startZooKeeper,
  startZooKeeperEnsemble,
  type ZooKeeperMember,
  type ZooKeeperService,
  zookeeperAvailable,
  zookeeperManaged,
  zookeeperMode,
} from './zookeeper.js';
