export { type EtcdBackendOptions, etcdBackend } from './etcd-backend.js';
