export {
  type ZooKeeperBackend,
  type ZooKeeperBackendOptions,
  zookeeperBackend,
} from './zk-backend.js';
