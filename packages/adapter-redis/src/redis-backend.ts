import {
  type AcquireRequest,
  type AcquireResult,
  type BackendCapabilities,
  type Clock,
  DlmError,
  type Grant,
  type HolderProof,
  holderChangeEvents,
  type LockBackend,
  type LockState,
  systemClock,
  toUnavailable,
} from '@dlm/core';
import type { Cluster, Redis } from 'ioredis';
import { within } from './command-bounds.js';
import { createCommandConnection, createSubscriberConnection, databaseOf } from './connections.js';
import { nameKeys, newRequestId } from './key-encoding.js';
import { createLockEvents, type LockEvents, subscribedWithin } from './lock-events.js';
import { wholeOption } from './option-checks.js';
import { createRedisNode, type RedisNode, sharedLimit } from './redis-node.js';
import { redisQueue } from './redis-queue.js';
import { type ReplicaOptions, type ReplicaWait, replicaWait } from './replicas.js';
import { createSentinelConnection, parseSentinels, type SentinelAddress } from './sentinel.js';

export interface RedisBackendOptions extends ReplicaOptions {
  /**
   * Your own ioredis client. It stays yours (`close()` leaves it open). Give it
   * `enableOfflineQueue: false`, `autoResendUnfulfilledCommands: false` and
   * `maxRetriesPerRequest: 0` so that an outage fails fast; the adapter bounds every call and
   * guards writes with a server-side deadline either way, so other settings cannot orphan a
   * lock, only make failures slower to show. A second connection for pub/sub is made from it
   * with `duplicate()`.
   */
  client?: Redis;
  /**
   * `redis://[:password@]host:port[/db]`, used when no `client` is given. Default
   * `redis://127.0.0.1:6379`. With `sentinels`, only its password and database are used.
   */
  url?: string;
  /**
   * Redis Sentinel: the sentinels (`host:port` or `{ host, port }`) to ask for the master named
   * `sentinelName`; the adapter follows the master they name after a failover. A failover can
   * lose the last writes (replication is asynchronous): see `minReplicas`.
   */
  sentinels?: ReadonlyArray<string | SentinelAddress>;
  /** The master's name the sentinels monitor (`sentinel monitor NAME …`); required with `sentinels`. */
  sentinelName?: string;
  /** Put in front of every key and every event channel. Default `dlm:`. No `{` or `}`. */
  prefix?: string;
  /** The longest any call may take before it fails with UNAVAILABLE. Default 2000. */
  commandTimeoutMs?: number;
  /**
   * Declare `durableAcrossRestart`: set it only when Redis runs with `appendonly yes` and
   * `appendfsync always`, so a crash loses no acknowledged grant or token. Default false.
   */
  durable?: boolean;
  /**
   * Subscribe to keyspace expiry notifications (switching them on with CONFIG SET if allowed)
   * and declare `expiryEvents` when they are on. Default true. Turn it off on a Redis shared
   * with many keys that expire: Redis finds expired keys by sampling, so its expiry
   * notifications can come late there; core then checks each lease at its end instead.
   */
  keyspaceEvents?: boolean;
  /**
   * How long a name's fence key (its last token) is kept after its last grant's lease, in ms.
   * Default 60000. Tokens stay strictly increasing as long as the Redis server's clock is
   * never set back by more than this; nothing per name remains after the lease plus this.
   */
  fenceRetentionMs?: number;
  /**
   * How long a waiter's entry in a name's fair queue counts without its dlm server's renewal
   * (renewed every third of it), in ms. Default 3000. A server that dies mid-wait holds up the
   * waiters behind its entries for at most this long.
   */
  waiterTtlMs?: number;
  clock?: Clock;
}

export interface RedisBackend extends LockBackend {
  /**
   * Resolves once the event subscription is in place and keyspace notifications are known
   * to be on or off (so `capabilities.expiryEvents` is final). Rejects with UNAVAILABLE when
   * Redis cannot be reached within `commandTimeoutMs`. Await it before handing the backend to
   * `createLockService`, which reads the capabilities once.
   */
  ready(): Promise<void>;
}

const DEFAULT_TIMEOUT_MS = 2_000;
const DEFAULT_FENCE_RETENTION_MS = 60_000;
const DEFAULT_WAITER_TTL_MS = 3_000;

function checkWaiterTtl(waiterTtlMs: number | undefined): number {
  // Below 30 ms, a renewal every third of it would not reach Redis in time.
  return wholeOption('waiterTtlMs', waiterTtlMs, DEFAULT_WAITER_TTL_MS, 30);
}

/** Checks the options every Redis adapter shares; returns the prefix and timeout to use. */
export function checkCommonOptions(options: {
  prefix?: string;
  commandTimeoutMs?: number;
  fenceRetentionMs?: number;
}): {
  prefix: string;
  commandTimeoutMs: number;
  fenceRetentionMs: number;
} {
  const prefix = options.prefix ?? 'dlm:';
  if (/[{}]/.test(prefix)) {
    // The name's hash tag must be the first {...} in the key.
    throw new DlmError('INVALID_PARAMS', 'prefix must not contain { or }', { field: 'prefix' });
  }
  const commandTimeoutMs = options.commandTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(commandTimeoutMs) || commandTimeoutMs <= 0) {
    throw new DlmError('INVALID_PARAMS', 'commandTimeoutMs must be a positive number', {
      field: 'commandTimeoutMs',
    });
  }
  const fenceRetentionMs = wholeOption(
    'fenceRetentionMs',
    options.fenceRetentionMs,
    DEFAULT_FENCE_RETENTION_MS,
    1,
  );
  return { prefix, commandTimeoutMs, fenceRetentionMs };
}

/**
 * A topology other than one server (cluster.ts): its command client, the subscriber for lock
 * events, and what it can promise. Made once the common options are checked.
 */
export interface RedisTopology {
  client: Redis | Cluster;
  ownsClient: boolean;
  /** A dedicated connection, not yet connected (`lazyConnect`), and the database it watches. */
  subscriber: Redis;
  db: number;
  fencing: BackendCapabilities['fencing'];
  keyspaceEvents: boolean;
}

/**
 * A dlm backend on one Redis server (`redisClusterBackend` in cluster.ts for a Redis Cluster).
 * Tokens come from the server's clock and a
 * per-name fence key in the same script as the `SET NX PX` (see redis-scripts.ts), so they
 * are strict for as long as Redis keeps its data and its clock does not step back by more
 * than `fenceRetentionMs`; the fence key expires that long after the last lease.
 *
 * @example
 * const backend = redisBackend({ url: 'redis://127.0.0.1:6379' });
 * await backend.ready();
 * const service = createLockService({ backend });
 */
export function redisBackend(options: RedisBackendOptions = {}): RedisBackend {
  return createRedisBackend(options);
}

/** One server, from `options.client`, `options.url`, or the master that Sentinel names. */
function singleServer(options: RedisBackendOptions, commandTimeoutMs: number): RedisTopology {
  const sentinels = options.sentinels === undefined ? undefined : parseSentinels(options.sentinels);
  const client =
    options.client ??
    (sentinels
      ? createSentinelConnection({
          sentinels,
          name: options.sentinelName ?? '',
          timeoutMs: commandTimeoutMs,
          ...(options.url === undefined ? {} : { url: options.url }),
        })
      : createCommandConnection(options.url ?? 'redis://127.0.0.1:6379', commandTimeoutMs));
  return {
    client,
    ownsClient: options.client === undefined,
    subscriber: createSubscriberConnection(client, commandTimeoutMs),
    db: databaseOf(client),
    // Strict unless a failover may lose the last grant: through Sentinel without `minReplicas`
    // the promoted replica may lack the fence key, and its clock alone then orders the tokens.
    fencing: sentinels && !(options.minReplicas ?? 0) ? 'best-effort' : 'strict',
    keyspaceEvents: options.keyspaceEvents ?? true,
  };
}

/** `redisBackend`, or the backend on another topology (see `RedisTopology`). */
export function createRedisBackend(
  options: RedisBackendOptions,
  topologyOf?: (commandTimeoutMs: number) => RedisTopology,
): RedisBackend {
  const { prefix, commandTimeoutMs, fenceRetentionMs } = checkCommonOptions(options);
  const waiterTtlMs = checkWaiterTtl(options.waiterTtlMs);
  const clock = options.clock ?? systemClock;
  const topology = topologyOf?.(commandTimeoutMs) ?? singleServer(options, commandTimeoutMs);
  const replicas = replicaWait(topology.client, clock, commandTimeoutMs, options);
  const node = createRedisNode({
    client: topology.client,
    prefix,
    commandTimeoutMs,
    clock,
    publishAcquired: true,
    fenceRetentionMs,
    fairQueue: true,
  });
  const durable = options.durable ?? false;

  const events = createLockEvents({
    prefix,
    sources: [{ subscriber: topology.subscriber, db: topology.db }],
    keyspace: topology.keyspaceEvents,
    mode: 'single',
    clock,
    onResubscribed: () => {
      queue.resync();
      void resynchronise(events, node);
    },
  });
  const r: BackendState = {
    node,
    events,
    clock,
    prefix,
    commandTimeoutMs,
    replicas,
    closed: false,
  };
  const queue = fairQueueOf(r, waiterTtlMs);

  return {
    kind: 'redis',

    get capabilities(): BackendCapabilities {
      return capabilities(topology, durable, events);
    },
    ready: () => ready(r),
    tryAcquire: (request) => tryAcquire(r, request),
    // The wait loop answers UNAVAILABLE once the backend is closed.
    queue: queue.queue,
    release: (proof) => release(r, proof),
    extend: (request) => extend(r, request),
    async inspect(name) {
      assertOpen(r);
      return node.inspect(name);
    },
    revoke: (name) => revoke(r, name),
    async requestRelease(name, reason) {
      assertOpen(r);
      await node.requestRelease(name, reason, newRequestId());
    },
    async lockDelayOf(name) {
      assertOpen(r);
      return node.lockDelayOf(name);
    },
    async list(namePrefix) {
      assertOpen(r);
      return node.list(namePrefix);
    },
    watch: (name, listener) => events.watch(name, listener),
    close: () => close(r, queue, topology),
  };
}

/** What the calls of one backend on one server (or one Cluster) share. */
interface BackendState {
  readonly node: RedisNode;
  readonly events: LockEvents;
  readonly clock: Clock;
  readonly prefix: string;
  readonly commandTimeoutMs: number;
  readonly replicas: ReplicaWait | undefined;
  closed: boolean;
}

/** Read on every call: `expiryEvents` is known only once the subscription is in place. */
function capabilities(
  topology: RedisTopology,
  durable: boolean,
  events: LockEvents,
): BackendCapabilities {
  return {
    fencing: topology.fencing,
    minTtlMs: 1,
    ttlGranularityMs: 1,
    durableAcrossRestart: durable,
    fairQueue: true,
    expiryEvents: events.expiryEventsOn(),
    sharedModes: true,
    lockDelay: true,
    maxHold: true,
  };
}

function assertOpen(r: BackendState): void {
  if (r.closed) throw new DlmError('UNAVAILABLE', 'the Redis backend is closed');
}

/** `minReplicas`: waits until enough replicas have the write `what` made to `name`'s lock. */
function confirmWrite(r: BackendState, what: string, name: string): Promise<void> | undefined {
  return r.replicas?.confirm(what, nameKeys(r.prefix, name).lock);
}

/** The queue driver core's wait loop runs over, granting through `tryAcquire`'s node. */
function fairQueueOf(r: BackendState, waiterTtlMs: number) {
  const { node, events, clock } = r;
  return redisQueue({
    node,
    events,
    clock,
    waiterTtlMs,
    isClosed: () => r.closed,
    subscribed: (name, startedAt) => subscribedOrRefused(r, 'acquire', startedAt, name),
    async confirmGrant(name, token) {
      await confirmWrite(r, 'acquire', name);
      events.noteGrant(name, token);
    },
    tryAcquire: (request) => tryAcquire(r, request),
  });
}

/**
 * After the event stream was down, compare what each watched name's watchers last heard with
 * what Redis holds now, and tell them the difference (a missed release or expiry would
 * otherwise leave a waiter asleep until the holder's old lease end, and a holder unaware).
 */
async function resynchronise(events: LockEvents, node: RedisNode): Promise<void> {
  await Promise.all(events.watchedNames().map((name) => resynchroniseName(events, node, name)));
}

async function resynchroniseName(events: LockEvents, node: RedisNode, name: string): Promise<void> {
  const before = events.lastToken(name);
  let state: LockState | null;
  try {
    state = await node.inspect(name);
  } catch {
    // Cannot tell: wake the waiters, who will ask for themselves.
    events.deliver({ name, type: 'released' });
    return;
  }
  if (events.lastToken(name) !== before) return; // the live stream knows better
  if (state?.mode === 'shared') {
    // Which shared holders came and went is not kept here: a wake-up makes core ask.
    events.setLastToken(name, undefined);
    events.deliver({ name, type: 'released' });
    return;
  }
  if (state && state.token === before) return;
  events.setLastToken(name, state?.token);
  const heard = before === undefined ? undefined : { token: before };
  for (const event of holderChangeEvents(name, heard, state ?? undefined, true)) {
    events.deliver(event);
  }
}

async function ready(r: BackendState): Promise<void> {
  assertOpen(r);
  await r.node.whenConnected();
  if (!(await within(r.clock, r.events.subscribed, r.commandTimeoutMs))) {
    throw toUnavailable(
      new Error(`no subscription within ${r.commandTimeoutMs} ms`),
      'redis backend',
    );
  }
}

/**
 * Waits for the event subscription and `name`'s channel (a grant must not go unheard), unless
 * Redis has refused every connection so far: then UNAVAILABLE at once, as a call after an
 * outage fails.
 */
function subscribedOrRefused(
  r: BackendState,
  what: string,
  startedAt: number,
  name: string,
): Promise<void> {
  r.node.assertReachable(what);
  return subscribedWithin(r.clock, r.events, r.commandTimeoutMs, startedAt, name);
}

async function tryAcquire(
  r: BackendState,
  { name, owner, ttlMs, keyHash, mode, limit, lockDelayMs, maxHoldMs }: AcquireRequest,
): Promise<AcquireResult> {
  assertOpen(r);
  const { clock, events } = r;
  const startedAt = clock.now();
  if (events.whenSubscribed(name)) await subscribedOrRefused(r, 'acquire', startedAt, name);
  const result = await r.node.acquire(
    name,
    owner,
    keyHash,
    ttlMs,
    startedAt,
    undefined,
    sharedLimit(mode, limit),
    lockDelayMs,
    maxHoldMs,
  );
  if (!result.granted) {
    if (result.conflict) return { granted: false, conflict: result.conflict };
    // Free, but others wait in its queue: they come first, and there is no lease to tell.
    if (result.queued) return { granted: false };
    const { ttlRemainingMs, lockDelayRemainingMs } = result;
    return {
      granted: false,
      ttlRemainingMs,
      ...(lockDelayRemainingMs && { lockDelayRemainingMs }),
    };
  }
  await confirmWrite(r, 'acquire', name);
  events.noteGrant(name, result.token);
  const { holdRemainingMs } = result;
  const grant = { name, owner, token: result.token, ttlMs: result.ttlMs ?? ttlMs };
  return {
    granted: true,
    grant: holdRemainingMs === undefined ? grant : Object.assign({}, grant, { holdRemainingMs }),
  };
}

async function release(r: BackendState, { name, token, keyHash }: HolderProof): Promise<boolean> {
  assertOpen(r);
  const released = await r.node.release(name, token, keyHash);
  if (released) await confirmWrite(r, 'release', name);
  return released;
}

async function extend(
  r: BackendState,
  request: HolderProof & { ttlMs: number },
): Promise<Grant | null> {
  assertOpen(r);
  const { name, token, ttlMs, keyHash } = request;
  const extended = await r.node.extend(name, token, keyHash, ttlMs);
  if (extended === null) return null;
  await confirmWrite(r, 'extend', name);
  return { name, token, ...extended };
}

async function revoke(r: BackendState, name: string): Promise<boolean> {
  assertOpen(r);
  const revoked = (await r.node.revoke(name)) !== null;
  if (revoked) await confirmWrite(r, 'revoke', name);
  return revoked;
}

async function close(
  r: BackendState,
  queue: { close(): Promise<void> },
  topology: RedisTopology,
): Promise<void> {
  if (r.closed) return;
  r.closed = true;
  // Waiters leave the queue while the connection is still there.
  await queue.close();
  await r.events.close();
  r.node.detach();
  // disconnect, not QUIT: a stalled server would never answer QUIT.
  if (topology.ownsClient) topology.client.disconnect();
}
