import { Redis, type RedisOptions } from 'ioredis';

/**
 * The ioredis settings that keep a lock client honest when Redis is down or stalled.
 *
 * - `enableOfflineQueue: false`: while disconnected a command fails at once instead of waiting
 *   in a queue and running whenever the connection comes back (after its caller gave up).
 * - `autoResendUnfulfilledCommands: false`: commands in flight when the connection dropped are
 *   not sent again after reconnecting (a replayed acquire would take a lock nobody holds).
 * - `maxRetriesPerRequest: 0`: those in-flight commands are rejected at the first disconnect.
 * - `socketTimeout`: a connection that owes replies and stays silent is torn down and rebuilt
 *   (a half-open TCP connection would otherwise hang). No `commandTimeout`: the adapter bounds
 *   every call itself (command-bounds.ts), and ioredis's would cost a timer per command.
 * - No auto-pipelining: the adapter batches the writes of one event-loop turn itself
 *   (`batchWrites` in redis-node.ts), without ioredis's pipeline object and promise per command,
 *   and without holding a turn's commands back until the previous batch is answered.
 *
 * The adapter also bounds every call itself and guards writes with a server-side deadline, so a
 * user-supplied client with other settings still cannot orphan a lock; it only fails slower.
 */
export function commandConnectionOptions(timeoutMs: number): RedisOptions {
  return {
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    socketTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    enableAutoPipelining: false,
    lazyConnect: false,
  };
}

/**
 * The subscriber: its commands are only (P)SUBSCRIBE and the keyspace CONFIG, which are safe
 * to queue and repeat. The adapter subscribes again itself on every `ready`, so it knows when
 * a re-subscription is complete (and can resynchronise what it may have missed).
 */
export function subscriberConnectionOptions(timeoutMs: number): RedisOptions {
  return {
    enableOfflineQueue: true,
    autoResubscribe: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: null,
    connectTimeout: timeoutMs,
    keepAlive: 10_000,
    enableAutoPipelining: false,
    lazyConnect: true,
  };
}

/** A connection for commands, from a URL (`redis://host:port/db`). */
export function createCommandConnection(url: string, timeoutMs: number): Redis {
  const client = new Redis(url, commandConnectionOptions(timeoutMs));
  // Errors surface on the commands that hit them; an 'error' event without a listener would
  // crash the process.
  client.on('error', () => {});
  return client;
}

/** A subscriber connection to the same server and database as `client`; not yet connected. */
export function createSubscriberConnection(client: Redis, timeoutMs: number): Redis {
  const subscriber = client.duplicate(subscriberConnectionOptions(timeoutMs));
  subscriber.on('error', () => {});
  return subscriber;
}

/** The database index a client uses (keyspace notification channels name it). */
export function databaseOf(client: Redis): number {
  return client.options.db ?? 0;
}
