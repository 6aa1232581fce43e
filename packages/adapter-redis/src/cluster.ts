import { createConnection } from 'node:net';
import { DlmError } from '@dlm/core';
import { AbstractConnector, Cluster, Redis } from 'ioredis';
import { commandConnectionOptions, subscriberConnectionOptions } from './connections.js';
import { type HostPort, parseHostPorts } from './host-ports.js';
import {
  createRedisBackend,
  type RedisBackend,
  type RedisBackendOptions,
} from './redis-backend.js';

/**
 * The backend on a Redis Cluster, through ioredis's `Cluster`:
 *
 * - Every script names only the keys of one lock name (`{hex}:lock`, `{hex}:fence`), and the hash
 *   tag puts both in one slot, so each primitive runs on the name's master, atomically. ioredis
 *   follows `MOVED` (and refreshes its slot map) and `ASK` while a slot moves; a script whose keys
 *   are split across the two nodes mid-migration gets `TRYAGAIN` and is sent again.
 * - Events: the scripts' `PUBLISH` goes, in a cluster, to every node (the cluster bus carries
 *   it), so one subscriber connection, to any node, hears the events of every name whose
 *   channel it subscribed to (event-channels.ts). It reconnects to
 *   the next node of the current topology when its node goes away, and every reconnect
 *   resynchronises the watched names (what a gap may have missed is read back).
 * - No keyspace expiry notifications: a node reports only its own keys' expiries, and after a
 *   failover another node would; core checks each lease at its end instead (`expiryEvents`
 *   false).
 * - `list` scans every master.
 * - Fencing is best-effort: replication is asynchronous, so a master killed right after a grant
 *   may be replaced by a replica without it; the lock can then be granted again, and the new
 *   token can repeat the lost one if the replica's fence key is behind too.
 */

export type ClusterAddress = HostPort;

export interface RedisClusterBackendOptions
  extends Omit<
    RedisBackendOptions,
    'client' | 'url' | 'keyspaceEvents' | 'sentinels' | 'sentinelName'
  > {
  /**
   * Some of the cluster's nodes (`host:port` or `{ host, port }`); the rest are discovered.
   * Required unless `client` is given.
   */
  nodes?: ReadonlyArray<string | ClusterAddress>;
  /** Your own ioredis `Cluster`; it stays yours (`close()` leaves it open). */
  client?: Cluster;
  /** The nodes' password (`requirepass`), and `username` for an ACL user. */
  password?: string;
  username?: string;
}

/** Parses `host:port` entries (as `--redis-cluster` takes them); INVALID_PARAMS when one is not. */
export function parseClusterAddresses(
  nodes: ReadonlyArray<string | ClusterAddress>,
): ClusterAddress[] {
  return parseHostPorts(nodes, 'nodes');
}

interface Credentials {
  password?: string;
  username?: string;
}

/**
 * A `Cluster` with the command settings of a single connection (connections.ts) on every node,
 * and no offline queue of its own: before the first connection, or while no node is reachable,
 * a command fails instead of waiting to run after its caller gave up. Redirections and failover
 * retries stay on (they are what a cluster client is for); a write that reaches a node late is
 * made harmless by its server-side deadline.
 */
export function createClusterConnection(
  nodes: ClusterAddress[],
  timeoutMs: number,
  credentials: Credentials = {},
): Cluster {
  const { lazyConnect: _lazy, ...perNode } = commandConnectionOptions(timeoutMs);
  const cluster = new Cluster(nodes, {
    redisOptions: Object.assign({}, perNode, credentials),
    enableOfflineQueue: false,
    enableAutoPipelining: false,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 50,
    slotsRefreshTimeout: timeoutMs,
  });
  // Errors surface on the commands that hit them.
  cluster.on('error', () => {});
  return cluster;
}

/** The nodes to try for the subscriber, in turn: the cluster's current topology, or the seeds. */
function subscriberAddresses(
  cluster: Cluster,
  seeds: ClusterAddress[],
): () => ClusterAddress | undefined {
  let next = 0;
  return () => {
    const known = cluster
      .nodes('all')
      .map((node) => ({ host: node.options.host ?? '127.0.0.1', port: node.options.port ?? 6379 }));
    const candidates = known.length > 0 ? known : seeds;
    next += 1;
    return candidates[(next - 1) % Math.max(1, candidates.length)];
  };
}

/**
 * An ioredis connector that connects each time to the next node from `pick`: the subscriber
 * is then an ordinary `Redis` whose every reconnect (after its node died) lands on another
 * node and emits `ready`, on which the event hub subscribes again and resynchronises.
 */
function rotatingConnector(pick: () => ClusterAddress | undefined) {
  return class RotatingConnector extends AbstractConnector {
    constructor(options: unknown) {
      super((options as { disconnectTimeout?: number }).disconnectTimeout ?? 2_000);
    }

    connect(): Promise<never> {
      this.connecting = true;
      const address = pick();
      // ioredis takes the stream once this resolves (the type says NetStream; a Socket is one).
      return new Promise((resolve, reject) => {
        process.nextTick(() => {
          if (!this.connecting) {
            reject(new Error('Connection is closed.'));
            return;
          }
          // Your own Cluster that has not connected yet: no node known; ioredis tries again.
          if (!address) {
            reject(new Error('no Redis Cluster node known yet'));
            return;
          }
          this.stream = createConnection(address);
          this.stream.once('error', (error: Error) => {
            this.firstError = error;
          });
          resolve(this.stream as never);
        });
      });
    }
  };
}

/** The event subscriber of a cluster backend (see the module comment); not yet connected. */
export function createClusterSubscriber(
  cluster: Cluster,
  seeds: ClusterAddress[],
  timeoutMs: number,
  credentials: Credentials = {},
): Redis {
  const subscriber = new Redis(
    Object.assign({}, subscriberConnectionOptions(timeoutMs), credentials, {
      // Named, so that an operator (and the tests) can tell which node it is on (CLIENT LIST).
      connectionName: 'dlm-events',
      Connector: rotatingConnector(subscriberAddresses(cluster, seeds)),
      // Another node is tried at once: a dead one will not be back soon.
      retryStrategy: () => 100,
    }),
  );
  subscriber.on('error', () => {});
  return subscriber;
}

/**
 * A dlm backend on a Redis Cluster (see the module comment for what differs from one Redis).
 *
 * @example
 * const backend = redisClusterBackend({ nodes: ['127.0.0.1:7000', '127.0.0.1:7001'] });
 * await backend.ready();
 * const service = createLockService({ backend });
 */
export function redisClusterBackend(options: RedisClusterBackendOptions): RedisBackend {
  if (options.client === undefined && options.nodes === undefined) {
    throw new DlmError('INVALID_PARAMS', 'nodes: give the cluster nodes (host:port, …)', {
      field: 'nodes',
    });
  }
  const seeds = options.nodes === undefined ? [] : parseClusterAddresses(options.nodes);
  const { client: own, nodes: _nodes, password, username, ...common } = options;
  const credentials: Credentials = Object.assign(
    {},
    password === undefined ? {} : { password },
    username === undefined ? {} : { username },
  );
  return createRedisBackend(common, (timeoutMs) => {
    const client = own ?? createClusterConnection(seeds, timeoutMs, credentials);
    return {
      client,
      ownsClient: own === undefined,
      subscriber: createClusterSubscriber(client, seeds, timeoutMs, credentials),
      db: 0,
      // As through Sentinel: strict only when each write waits for a replica (minReplicas).
      fencing: (options.minReplicas ?? 0) > 0 ? 'strict' : 'best-effort',
      keyspaceEvents: false,
    };
  });
}
