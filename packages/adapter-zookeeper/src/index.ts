export { type ZooKeeperBackendOptions, zookeeperBackend } from './zk-backend.js';
