/*
 * `redisBackend` is the backend. The other exports are the building blocks of a backend made of
 * several Redis nodes (`@dlm/adapter-redlock` is one): one node's atomic primitives, the
 * multiplexed event hub, the safe connection settings and the option checks every Redis adapter
 * shares. See the README's "Building blocks" section. They follow semver like `redisBackend`.
 */
export {
  type ClusterAddress,
  parseClusterAddresses,
  type RedisClusterBackendOptions,
  redisClusterBackend,
} from './cluster.js';
export { within } from './command-bounds.js';
export { createCommandConnection, createSubscriberConnection, databaseOf } from './connections.js';
export { type NameKeys, nameKeys, newRequestId } from './key-encoding.js';
export {
  createLockEvents,
  type EventMode,
  type EventSource,
  type LockEvents,
  type LockEventsOptions,
  subscribedWithin,
} from './lock-events.js';
export {
  checkCommonOptions,
  type RedisBackend,
  type RedisBackendOptions,
  redisBackend,
} from './redis-backend.js';
export {
  type AdoptTokenRequest,
  createRedisNode,
  type NodeAcquireResult,
  type QueueReply,
  type QueueRequest,
  type RedisNode,
  type RedisNodeOptions,
  sharedLimit,
} from './redis-node.js';
export type { ReplicaOptions } from './replicas.js';
export type { SentinelAddress } from './sentinel.js';
