/**
 * Building blocks shared with `@dlm/adapter-redlock` (one Redis node's primitives, the
 * multiplexed event subscriber, the safe connection settings). Not a stable API: it follows
 * this package's internals and may change in any release.
 */
export { bounded, type CallBounds, within } from './command-bounds.js';
export {
  commandConnectionOptions,
  createCommandConnection,
  createSubscriberConnection,
  databaseOf,
  subscriberConnectionOptions,
} from './connections.js';
export { eventChannel, type NameKeys, nameKeys } from './key-encoding.js';
export {
  createLockEvents,
  type EventMode,
  type EventSource,
  type LockEvents,
  type LockEventsOptions,
} from './lock-events.js';
export { checkCommonOptions } from './redis-backend.js';
export {
  createRedisNode,
  type NodeAcquireResult,
  type RedisNode,
  type RedisNodeOptions,
} from './redis-node.js';
