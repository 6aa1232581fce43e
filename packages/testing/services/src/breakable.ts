import { postgresAvailable, postgresManaged } from './postgres.js';
import { redisSentinelAvailable, redisSentinelManaged } from './redis-sentinel.js';
import {
  etcdAvailable,
  etcdManaged,
  redisAvailable,
  redisManaged,
  zookeeperAvailable,
  zookeeperManaged,
} from './services.js';

const CHECKS = {
  redis: [redisAvailable, redisManaged],
  'redis-sentinel': [redisSentinelAvailable, redisSentinelManaged],
  etcd: [etcdAvailable, etcdManaged],
  zookeeper: [zookeeperAvailable, zookeeperManaged],
  postgres: [postgresAvailable, postgresManaged],
} as const satisfies Record<string, readonly [() => boolean, () => boolean]>;

/** A service a test can start and break: see {@link breakable}. */
export type BreakableKind = keyof typeof CHECKS;

/**
 * Whether a test may start `kind` and kill, pause or restart it: the service can run here (with
 * CI=true a missing one throws, as `<kind>Available` does) and it is one these helpers start,
 * not the user's own server named by a `DLM_TEST_*` variable.
 */
export function breakable(kind: BreakableKind): boolean {
  const [available, managed] = CHECKS[kind];
  return available() && managed();
}
