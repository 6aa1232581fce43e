import {
  type AcquireRequest,
  type Clock,
  corkUntil,
  createDeadlineQueue,
  type DeadlineQueue,
  DlmError,
  type HolderState,
  type LockConflict,
  type LockState,
  toUnavailable,
} from '@dlm/core';
import { Cluster, type Redis } from 'ioredis';
import { bounded, within } from './command-bounds.js';
import {
  askedMessage,
  holdersKeyPattern,
  lockKeyPattern,
  type NameKeys,
  nameKeys,
  nameOfHoldersKey,
  nameOfLockKey,
} from './key-encoding.js';
import {
  ACQUIRE,
  ADOPT_TOKEN,
  EXTEND,
  INSPECT,
  LOCK_DELAY,
  type LuaScript,
  loadScripts,
  QUEUE_JOIN,
  QUEUE_LEAVE,
  QUEUE_LOOK,
  QUEUE_PLACE,
  QUEUE_RENEW,
  RELEASE,
  REVOKE,
  runScript,
} from './redis-scripts.js';
import { createServerClock, type ServerClock } from './server-clock.js';

/**
 * The lock primitives on ONE Redis server, each one script call bounded in time. The
 * single-Redis backend is one node; Redlock runs the same operations on N nodes.
 */

export type NodeAcquireResult =
  | {
      granted: true;
      token: bigint;
      /** false: the same owner's lease, refreshed */
      fresh: boolean;
      /** How many holders the name has after the grant. */
      holders: number;
      /** A refresh: the ms it was refreshed for (clamped to its cap on holding). */
      ttlMs?: number;
      /** A refresh of a capped lease: the ms it had left to its cap. */
      holdRemainingMs?: number;
    }
  /** `queued`: the lock is free but someone waits in its fair queue (no barging). */
  | {
      granted: false;
      ttlRemainingMs: number;
      queued?: true;
      conflict?: undefined;
      /** Free, but in its lock-delay for this long (`ttlRemainingMs` says the same). */
      lockDelayRemainingMs?: number;
    }
  /** The request can never be granted as asked while the current holders hold it. */
  | { granted: false; conflict: LockConflict; ttlRemainingMs?: undefined; queued?: undefined };

/** One waiter's request to the name's fair queue (QUEUE_JOIN, QUEUE_LOOK). */
export interface QueueRequest {
  name: string;
  owner: string;
  keyHash: string | undefined;
  ttlMs: number;
  /** The entry's id: unique to this wait. */
  id: string;
  /** How long the entry counts without a renewal, in ms. */
  waiterTtlMs: number;
  /** Shared: the limit; undefined: exclusive. */
  limit?: number | undefined;
  /** The lease's lock-delay (exclusive only; absent: none). */
  lockDelayMs?: number | undefined;
  /** The lease's cap on holding (exclusive only; absent: none). */
  maxHoldMs?: number | undefined;
}

/** An extended lease: its owner, the ms it was extended for (clamped to its cap), the ms left to its cap. */
export interface NodeExtended {
  owner: string;
  ttlMs: number;
  holdRemainingMs?: number;
}

/** What a join or a look found. */
export type QueueReply =
  | { kind: 'granted'; token: bigint }
  /** Queued: the entry just ahead (and its ms left) or, first, the holder's lease left. */
  | { kind: 'queued'; ahead?: { id: string; endsInMs: number }; holderMs?: number }
  /** The entry stopped counting (its renewals did not come in time). */
  | { kind: 'gone' }
  /** The request can never be granted as asked while the current holders hold it. */
  | { kind: 'conflict'; conflict: LockConflict };

export interface RedisNodeOptions {
  /** One server, or a Redis Cluster (each call's keys share one slot). */
  client: Redis | Cluster;
  prefix: string;
  commandTimeoutMs: number;
  clock: Clock;
  /** Publish `acquired` from the acquire script (Redlock announces after its quorum instead). */
  publishAcquired: boolean;
  /** How long a name's fence key outlives its last grant's lease (see redis-scripts.ts). */
  fenceRetentionMs: number;
  /** The names have fair queues: a try-lock refuses a free lock while someone is queued. */
  fairQueue?: boolean;
}

/** What Redlock's second step sets on one node (see `RedisNode.adoptToken`). */
export interface AdoptTokenRequest {
  name: string;
  owner: string;
  keyHash: string | undefined;
  token: bigint;
  /** The lease on the nodes: the fence key is kept that long plus the retention margin. */
  ttlMs: number;
  /** Publish `acquired` (the grant was fresh on some node). */
  announce: boolean;
  /** The lease's time to live from now on, in ms (default: it keeps its own). */
  leaseMs?: number;
}

export interface RedisNode {
  readonly client: Redis | Cluster;
  /**
   * `startedAt` (monotonic) starts the call's time budget; default now. `keyHash` is stored with
   * the lease and must match for the same owner's re-acquire (undefined: none). `freshMs`: how
   * long a fresh lease lives on the node (default `ttlMs`; a re-acquire is refreshed for `ttlMs`).
   * `limit`: a shared request with that limit; undefined: exclusive. `lockDelayMs`: the lease's
   * lock-delay, `maxHoldMs` its cap on holding (exclusive only; see redis-scripts.ts).
   */
  acquire(
    name: string,
    owner: string,
    keyHash: string | undefined,
    ttlMs: number,
    startedAt?: number,
    freshMs?: number,
    limit?: number,
    lockDelayMs?: number,
    maxHoldMs?: number,
  ): Promise<NodeAcquireResult>;
  /** How long `name`'s lock-delay has left (0: none, or held). */
  lockDelayOf(name: string): Promise<number>;
  /** `keyHash` undefined: the token alone (an operator's call). */
  release(name: string, token: bigint, keyHash: string | undefined): Promise<boolean>;
  /**
   * The holder's owner and the ms granted when extended (clamped to its cap on holding); null
   * when `token` (and `keyHash`) do not hold the lock, or it is at its cap.
   */
  extend(
    name: string,
    token: bigint,
    keyHash: string | undefined,
    ttlMs: number,
    startedAt?: number,
  ): Promise<NodeExtended | null>;
  inspect(name: string): Promise<LockState | null>;
  revoke(name: string): Promise<{ token: bigint; owner: string } | null>;
  /** Publishes a release request (`askedMessage`) on the name's event channel. */
  requestRelease(name: string, reason: string | undefined, id: bigint): Promise<void>;
  /**
   * Redlock: raise this node's counter to `token` and relabel `owner`'s lease with it; `ttlMs`
   * is the lease on the nodes (the fence key is kept that long plus the retention margin).
   */
  adoptToken(request: AdoptTokenRequest): Promise<boolean>;
  list(namePrefix: string): Promise<LockState[]>;
  /** Queues the waiter, or grants at once when the lock is free and nobody is queued. */
  queueJoin(request: QueueRequest, startedAt: number): Promise<QueueReply>;
  /** Grants when the waiter's entry is the first live one and the lock is free. */
  queueLook(request: QueueRequest, startedAt: number): Promise<QueueReply>;
  queueLeave(name: string, id: string): Promise<void>;
  /** Renews this server's entries of `name`; returns the ids still counting. */
  queueRenew(name: string, ids: readonly string[], waiterTtlMs: number): Promise<string[]>;
  /** The entries of `name`'s queue that count, or entry `id`'s place among them (0: gone). */
  queuePlace(name: string, id?: string): Promise<number>;
  /** Resolves once the client has connected for the first time (UNAVAILABLE after the time-out). */
  whenConnected(): Promise<void>;
  /**
   * Throws UNAVAILABLE (`not connected to Redis (<why>; reconnecting)`) while the client has
   * never connected and its last attempt failed: a call need not wait for a connection that
   * was refused.
   */
  assertReachable(what: string): void;
  /** Stops listening to the client's events (does not close it). */
  detach(): void;
}

/**
 * A request's limit when it is shared (what the scripts take), undefined when exclusive. Core
 * checks `limit` (1 to `maxHolders`); a shared request without one is refused here rather than
 * stored with a limit nobody asked for.
 */
export function sharedLimit(
  mode: AcquireRequest['mode'],
  limit: AcquireRequest['limit'],
): number | undefined {
  if (mode !== 'shared') return undefined;
  if (limit === undefined || !Number.isSafeInteger(limit) || limit < 1) {
    throw new DlmError('INVALID_PARAMS', 'limit must be a whole number of holders ≥ 1', {
      field: 'limit',
    });
  }
  return limit;
}

/** A lock value's token and owner; its key hash stays here (see redis-scripts.ts). */
function parseValue(value: string): { token: bigint; owner: string } {
  const sep = value.indexOf(':');
  const space = value.indexOf(' ');
  const tokenEnd = space >= 0 && space < sep ? space : sep;
  return { token: BigInt(value.slice(0, tokenEnd)), owner: value.slice(sep + 1) };
}

/** A script's `{-2, field, now, limit}`: why the request can never be granted as asked. */
/** A script's ms left to a cap on holding (-1 or absent: none), as a grant's field. */
function holdLeft(value: unknown): { holdRemainingMs?: number } {
  const ms = value === undefined ? -1 : Number(value);
  return ms < 0 ? {} : { holdRemainingMs: ms };
}

function conflictOf(reply: unknown[]): LockConflict {
  return reply[1] === 'limit' ? { field: 'limit', limit: Number(reply[3]) } : { field: 'mode' };
}

/** An INSPECT reply (see redis-scripts.ts) as a lock state, holders ordered by token. */
function stateOf(name: string, reply: unknown[]): LockState | null {
  if (reply.length < 2) return null;
  if (reply[0] !== 's') {
    const { token, owner } = parseValue(String(reply[0]));
    return { name, owner, token, ttlRemainingMs: Math.max(0, Number(reply[1])) };
  }
  const holders: HolderState[] = [];
  for (let i = 2; i + 2 < reply.length; i += 3) {
    holders.push({
      token: BigInt(String(reply[i])),
      owner: String(reply[i + 1]),
      ttlRemainingMs: Math.max(0, Number(reply[i + 2])),
    });
  }
  holders.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
  const top = holders.at(-1);
  if (!top) return null;
  return { name, ...top, mode: 'shared', limit: Number(reply[1]), holders };
}

function asArray(reply: unknown, what: string): unknown[] {
  if (!Array.isArray(reply)) throw new DlmError('INTERNAL', `${what}: unexpected reply from Redis`);
  return reply;
}

const SCAN_COUNT = 1_000;
const KEY_CACHE_MAX = 4_096;

/** The one-node primitives (see `RedisNode`). */
class ScriptedRedisNode implements RedisNode {
  readonly client: Redis | Cluster;
  private readonly prefix: string;
  private readonly clock: Clock;
  private readonly timeoutMs: number;
  private readonly serverClock: ServerClock;
  private readonly deadlines: DeadlineQueue;
  /**
   * A name's keys, for the names in use (a lock is acquired and released by name, again and
   * again); cleared when full.
   */
  private readonly keyCache = new Map<string, NameKeys>();
  private everReady: boolean;
  private readonly onReady: () => void;
  /**
   * Why the client's attempts to connect have failed, until its first connection is up: from
   * then on a call fails at once with it (as one does with the offline queue off after an
   * outage), not after waiting `commandTimeoutMs` for a connection that was refused.
   */
  private connectFailure: Error | undefined;
  private readonly onError: (error: Error) => void;
  /**
   * Commands must reach Redis in the order they were called: Redlock relabels a grant right
   * after it, and a caller may release right after that. A command that has to wait before it
   * can be sent (for the first connection, or to measure the server's clock) therefore holds
   * back every later one until it has been handed to the client. When nothing waits, a command
   * is sent synchronously, in the caller's turn.
   */
  private turn: Promise<void> | undefined;

  constructor(private readonly options: RedisNodeOptions) {
    const { client, prefix, clock } = options;
    this.client = client;
    this.prefix = prefix;
    this.clock = clock;
    this.timeoutMs = options.commandTimeoutMs;
    this.serverClock = createServerClock(clock, this.timeoutMs);
    this.deadlines = createDeadlineQueue(clock, this.timeoutMs);
    this.everReady = client.status === 'ready';
    if (this.everReady) loadScripts(client);
    this.onReady = () => {
      this.everReady = true;
      loadScripts(client);
      // A new connection may reach another server (failover) whose clock we have not measured.
      this.serverClock.reset();
      this.connectFailure = undefined;
    };
    this.onError = (error) => {
      if (!this.everReady) this.connectFailure = error;
    };
    client.on('ready', this.onReady);
    client.on('error', this.onError);
  }

  private keysOf(name: string): NameKeys {
    let keys = this.keyCache.get(name);
    if (keys === undefined) {
      keys = nameKeys(this.prefix, name);
      if (this.keyCache.size >= KEY_CACHE_MAX) this.keyCache.clear();
      this.keyCache.set(name, keys);
    }
    return keys;
  }

  /** Time left of a call's budget, for its next step. */
  private remaining(startedAt: number): number {
    return Math.max(1, this.timeoutMs - (this.clock.now() - startedAt));
  }

  private connectedOnce(): boolean {
    return this.everReady || this.client.status === 'ready';
  }

  /**
   * Resolves once the client's first connection is up. Only the first: afterwards, with the
   * offline queue off, a command while disconnected fails at once, which is what we want.
   */
  private firstConnection(what: string, startedAt: number): Promise<void> | undefined {
    if (this.connectedOnce()) return undefined;
    if (this.client.status === 'wait') this.client.connect().catch(() => {});
    return new Promise<void>((resolve, reject) => {
      const done = (error?: unknown) => {
        timer.cancel();
        this.client.off('ready', onConnected);
        this.client.off('error', onError);
        if (error === undefined) resolve();
        else reject(toUnavailable(error, what));
      };
      const onConnected = () => done();
      const onError = (error: unknown) => done(error);
      const timer = this.clock.setTimer(
        () => done(new Error(`not connected within ${this.timeoutMs} ms`)),
        this.remaining(startedAt),
      );
      this.client.once('ready', onConnected);
      this.client.once('error', onError);
    });
  }

  assertReachable(what: string): void {
    const failure = this.connectFailure;
    if (failure === undefined || this.connectedOnce()) return;
    const down = new Error(`not connected to Redis (${failure.message}; reconnecting)`, {
      cause: failure,
    });
    throw toUnavailable(down, what, false, 'Redis');
  }

  /**
   * The commands of one event-loop turn leave in one write: the first corks the socket and the
   * check phase (after every I/O callback of the turn, e.g. every WebSocket frame read) uncorks
   * it. Under load that is one system call for many commands, in Node and in Redis, without
   * ioredis's auto-pipelining (a pipeline object and an extra promise per command, and a turn's
   * commands held back until the previous batch is answered). Order on the connection is kept.
   * A client that auto-pipelines batches by itself.
   */
  private batchWrites(): void {
    // A Cluster writes to one connection per node, none of which is ours to cork.
    if (this.client instanceof Cluster) return;
    if (this.client.options.enableAutoPipelining || this.client.status !== 'ready') return;
    corkUntil(this.client.stream, setImmediate);
  }

  /** Measures the server's clock (one TIME round trip). */
  private async calibrate(what: string, startedAt: number): Promise<void> {
    const reply = await bounded(
      { clock: this.clock, timeoutMs: this.remaining(startedAt) },
      what,
      false,
      () => this.client.time(),
    );
    const [seconds, micros] = reply.map((part) => Number(part));
    this.serverClock.observe(
      (seconds ?? 0) * 1_000 + Math.floor((micros ?? 0) / 1_000),
      this.clock.now(),
    );
  }

  private send(
    what: string,
    write: boolean,
    startedAt: number,
    script: LuaScript,
    keys: string[],
    args: (deadline: number) => Array<string | number>,
    needsDeadline: boolean,
  ): Promise<unknown> {
    const dispatch = (deadline: number) =>
      bounded(
        { clock: this.clock, timeoutMs: this.remaining(startedAt), deadlines: this.deadlines },
        what,
        write,
        (abandoned) => {
          this.batchWrites();
          return runScript(this.client, script, keys, args(deadline), abandoned);
        },
      );
    const budget = this.timeoutMs - (this.clock.now() - startedAt);
    const known = needsDeadline ? this.serverClock.deadline(budget) : 0;
    if (this.turn === undefined && known !== undefined && this.connectedOnce()) {
      return dispatch(known);
    }
    const previous = this.turn;
    let handedOver: () => void = () => {};
    const mine = new Promise<void>((resolve) => {
      handedOver = resolve;
    });
    this.turn = mine;
    const prepared = (async () => {
      try {
        if (previous && !(await within(this.clock, previous, this.remaining(startedAt)))) {
          throw new DlmError('UNAVAILABLE', `${what}: Redis did not take earlier commands in time`);
        }
        this.assertReachable(what);
        await this.firstConnection(what, startedAt);
        if (!needsDeadline) return dispatch(0);
        if (this.serverClock.deadline(budget) === undefined) await this.calibrate(what, startedAt);
        const deadline = this.serverClock.deadline(this.timeoutMs - (this.clock.now() - startedAt));
        // Never send a write without its deadline: that is what keeps a late one harmless.
        if (deadline === undefined) throw new DlmError('UNAVAILABLE', `${what}: no server time`);
        return dispatch(deadline);
      } finally {
        handedOver();
        if (this.turn === mine) this.turn = undefined;
      }
    })();
    return prepared;
  }

  private call(
    what: string,
    write: boolean,
    startedAt: number,
    script: LuaScript,
    keys: string[],
    args: Array<string | number>,
  ): Promise<unknown> {
    return this.send(what, write, startedAt, script, keys, () => args, false);
  }

  private observe(serverMs: unknown): void {
    if (typeof serverMs === 'number') this.serverClock.observe(serverMs, this.clock.now());
  }

  private stale(what: string): DlmError {
    // Seen in a reply that came in time only if our measure of the server's clock is off
    // (its clock jumped): measure again next time.
    this.serverClock.reset();
    return new DlmError(
      'UNAVAILABLE',
      `${what}: Redis ran the request after its deadline and ignored it (stalled server or clock jump)`,
    );
  }

  async inspect(name: string): Promise<LockState | null> {
    const keys = this.keysOf(name);
    const reply = asArray(
      await this.call('inspect', false, this.clock.now(), INSPECT, [keys.lock], []),
      'inspect',
    );
    return stateOf(name, reply);
  }

  /** ACQUIRE's eight arguments (the queue scripts append theirs). */
  private acquireArgs(
    keys: NameKeys,
    owner: string,
    keyHash: string | undefined,
    ttlMs: number,
    deadline: number,
    freshMs?: number,
  ): Array<string | number> {
    return [
      owner,
      ttlMs,
      deadline,
      this.options.publishAcquired ? keys.events : '',
      keys.hex,
      keyHash ?? '',
      this.options.fenceRetentionMs,
      freshMs === undefined ? '' : Math.max(1, Math.ceil(freshMs)),
    ];
  }

  /** How long `name`'s lock-delay has left (0: none, or held). */
  async lockDelayOf(name: string): Promise<number> {
    const keys = this.keysOf(name);
    const reply = await this.call('inspect', false, this.clock.now(), LOCK_DELAY, [keys.lock], []);
    return Math.max(0, Number(reply));
  }

  async acquire(
    name: string,
    owner: string,
    keyHash: string | undefined,
    ttlMs: number,
    startedAt = this.clock.now(),
    freshMs?: number,
    limit?: number,
    lockDelayMs?: number,
    maxHoldMs?: number,
  ): Promise<NodeAcquireResult> {
    const keys = this.keysOf(name);
    const reply = asArray(
      await this.send(
        'acquire',
        true,
        startedAt,
        ACQUIRE,
        [keys.lock, keys.fence],
        (deadline) => [
          ...this.acquireArgs(keys, owner, keyHash, ttlMs, deadline, freshMs),
          // With fair queues, a free lock is refused while someone waits.
          this.options.fairQueue ? keys.queueEnds : '',
          limit === undefined ? 'x' : 's',
          limit ?? 1,
          lockDelayMs ?? 0,
          maxHoldMs ?? 0,
        ],
        true,
      ),
      'acquire',
    );
    this.observe(reply[2]);
    if (reply[0] === -1) throw this.stale('acquire');
    if (reply[0] === 1) {
      return {
        granted: true,
        token: BigInt(String(reply[1])),
        fresh: reply[3] === 1,
        holders: Number(reply[4] ?? 1),
        ...(reply[5] !== undefined && { ttlMs: Number(reply[5]) }),
        ...holdLeft(reply[6]),
      };
    }
    if (reply[0] === -2) return { granted: false, conflict: conflictOf(reply) };
    if (reply[1] === -1) return { granted: false, ttlRemainingMs: 0, queued: true };
    const ttlRemainingMs = Math.max(0, Number(reply[1]));
    if (reply[3] === 'd')
      return { granted: false, ttlRemainingMs, lockDelayRemainingMs: ttlRemainingMs };
    return { granted: false, ttlRemainingMs };
  }

  private queueKeys(name: string): { keys: NameKeys; list: string[] } {
    const keys = this.keysOf(name);
    return { keys, list: [keys.lock, keys.fence, keys.queue, keys.queueEnds, keys.queueSeq] };
  }

  /** QUEUE_JOIN or QUEUE_LOOK, and what it found. */
  private async queueStep(
    what: 'queue-join' | 'queue-look',
    request: QueueRequest,
    startedAt: number,
  ): Promise<QueueReply> {
    const { name, owner, keyHash, ttlMs, id, waiterTtlMs, limit, lockDelayMs, maxHoldMs } = request;
    const { keys, list } = this.queueKeys(name);
    const reply = asArray(
      await this.send(
        what,
        true,
        startedAt,
        what === 'queue-join' ? QUEUE_JOIN : QUEUE_LOOK,
        list,
        (deadline) => [
          ...this.acquireArgs(keys, owner, keyHash, ttlMs, deadline),
          id,
          waiterTtlMs,
          limit === undefined ? 'x' : 's',
          limit ?? 1,
          lockDelayMs ?? 0,
          maxHoldMs ?? 0,
        ],
        true,
      ),
      what,
    );
    this.observe(reply[0] === 3 ? reply[1] : reply[reply[0] === 2 ? 4 : 2]);
    if (reply[0] === -1) throw this.stale(what);
    if (reply[0] === 1) return { kind: 'granted', token: BigInt(String(reply[1])) };
    if (reply[0] === 3) return { kind: 'gone' };
    if (reply[0] === -2) return { kind: 'conflict', conflict: conflictOf(reply) };
    // {0, pttl, now} cannot come from these scripts: ACQUIRE's refusals become {2, …}.
    const ahead = String(reply[1] ?? '');
    const holderMs = Number(reply[3]);
    return {
      kind: 'queued',
      ...(ahead === '' ? {} : { ahead: { id: ahead, endsInMs: Math.max(0, Number(reply[2])) } }),
      ...(holderMs >= 0 ? { holderMs } : {}),
    };
  }

  queueJoin(request: QueueRequest, startedAt: number): Promise<QueueReply> {
    return this.queueStep('queue-join', request, startedAt);
  }

  queueLook(request: QueueRequest, startedAt: number): Promise<QueueReply> {
    return this.queueStep('queue-look', request, startedAt);
  }

  async queueLeave(name: string, id: string): Promise<void> {
    const { keys, list } = this.queueKeys(name);
    await this.call('queue-leave', true, this.clock.now(), QUEUE_LEAVE, list, [
      id,
      keys.events,
      keys.hex,
    ]);
  }

  async queueRenew(name: string, ids: readonly string[], waiterTtlMs: number): Promise<string[]> {
    const { list } = this.queueKeys(name);
    const reply = asArray(
      await this.call('queue-renew', true, this.clock.now(), QUEUE_RENEW, list, [
        waiterTtlMs,
        ...ids,
      ]),
      'queue-renew',
    );
    return reply.map(String);
  }

  async queuePlace(name: string, id = ''): Promise<number> {
    const { list } = this.queueKeys(name);
    return Number(await this.call('inspect', false, this.clock.now(), QUEUE_PLACE, list, [id]));
  }

  async release(name: string, token: bigint, keyHash: string | undefined): Promise<boolean> {
    const keys = this.keysOf(name);
    const reply = await this.call(
      'release',
      true,
      this.clock.now(),
      RELEASE,
      [keys.lock],
      [token.toString(), keys.events, keys.hex, keyHash ?? '-'],
    );
    return reply === 1;
  }

  async extend(
    name: string,
    token: bigint,
    keyHash: string | undefined,
    ttlMs: number,
    startedAt = this.clock.now(),
  ): Promise<NodeExtended | null> {
    const keys = this.keysOf(name);
    const reply = asArray(
      await this.send(
        'extend',
        true,
        startedAt,
        EXTEND,
        [keys.lock],
        (deadline) => [token.toString(), ttlMs, deadline, keyHash ?? '-', keys.events, keys.hex],
        true,
      ),
      'extend',
    );
    this.observe(reply[2]);
    if (reply[0] === -1) throw this.stale('extend');
    if (reply[0] !== 1) return null;
    return { owner: String(reply[1]), ttlMs: Number(reply[3] ?? ttlMs), ...holdLeft(reply[4]) };
  }

  async revoke(name: string): Promise<{ token: bigint; owner: string } | null> {
    const keys = this.keysOf(name);
    const reply = asArray(
      await this.send(
        'revoke',
        true,
        this.clock.now(),
        REVOKE,
        [keys.lock],
        (deadline) => [keys.events, keys.hex, deadline],
        true,
      ),
      'revoke',
    );
    if (reply[0] === -1) throw this.stale('revoke');
    return reply[0] === 1 ? parseValue(String(reply[1])) : null;
  }

  async requestRelease(name: string, reason: string | undefined, id: bigint): Promise<void> {
    const keys = this.keysOf(name);
    const message = askedMessage(keys.hex, id, reason);
    // A cluster's bus carries a PUBLISH to every node, as it does the scripts' events.
    await bounded({ clock: this.clock, timeoutMs: this.timeoutMs }, 'requestRelease', true, () =>
      this.client.publish(keys.events, message),
    );
  }

  async adoptToken({
    name,
    owner,
    keyHash,
    token,
    ttlMs,
    announce,
    leaseMs,
  }: AdoptTokenRequest): Promise<boolean> {
    const keys = this.keysOf(name);
    const reply = await this.call(
      'adopt-token',
      true,
      this.clock.now(),
      ADOPT_TOKEN,
      [keys.lock, keys.fence],
      [
        owner,
        token.toString(),
        announce ? keys.events : '',
        keys.hex,
        keyHash ?? '',
        ttlMs + this.options.fenceRetentionMs,
        leaseMs === undefined ? '' : Math.max(1, Math.ceil(leaseMs)),
      ],
    );
    return reply === 1;
  }

  async list(namePrefix: string): Promise<LockState[]> {
    // A cluster's keys are spread over its masters: each is scanned.
    const servers = this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
    const found = (
      await Promise.all(servers.map((server) => this.scan(server, namePrefix)))
    ).flat();
    // SCAN may return a key twice; keep one entry per name.
    const byName = new Map(found.map((state) => [state.name, state]));
    return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /**
   * The held locks whose names start with `namePrefix` among `server`'s keys: exclusive ones by
   * their lock keys, shared ones by their holders keys.
   */
  private async scan(server: Redis, namePrefix: string): Promise<LockState[]> {
    const found: LockState[] = [];
    for (const [pattern, nameOf] of [
      [lockKeyPattern(this.prefix, namePrefix), nameOfLockKey],
      [holdersKeyPattern(this.prefix, namePrefix), nameOfHoldersKey],
    ] as const) {
      let cursor = '0';
      do {
        const [next, keys] = await bounded(
          { clock: this.clock, timeoutMs: this.timeoutMs },
          'list',
          false,
          () => server.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT),
        );
        cursor = next;
        const names = keys.flatMap((key) => {
          const name = nameOf(this.prefix, key);
          return name === undefined ? [] : [name];
        });
        const states = await Promise.all(names.map((name) => this.inspect(name)));
        for (const state of states) if (state) found.push(state);
      } while (cursor !== '0');
    }
    return found;
  }

  async whenConnected(): Promise<void> {
    await this.firstConnection('connect', this.clock.now());
  }

  detach(): void {
    this.client.off('ready', this.onReady);
    this.client.off('error', this.onError);
  }
}

/** One Redis node's lock primitives, each one bounded script call. */
export function createRedisNode(options: RedisNodeOptions): RedisNode {
  return new ScriptedRedisNode(options);
}
