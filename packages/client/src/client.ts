import { type Clock, DlmError, isDlmError, parseToken, systemClock } from '@dlm/core';
import { type ParamsOf, type ResultOf, WS_PATH } from '@dlm/protocol';
import {
  type Connection,
  createConnection,
  type HelloResult,
  type ReconnectOptions,
  type ServerNotification,
} from './connection.js';
import { createEmitter } from './emitter.js';
import {
  createLease,
  driftMarginMs,
  type Lease,
  type LeaseContext,
  type LeaseHandle,
  type LostReason,
  leaseKey,
} from './lease.js';
import { defaultWebSocket, type WebSocketConstructor } from './websocket.js';

/** The version this package reports in `session.hello`. */
const CLIENT_VERSION = '0.1.0';

export interface ClientOptions {
  /**
   * The server: `ws://host:port` (the path defaults to `/v1/ws`), `wss://…`, or `http(s)://…`
   * (turned into `ws(s)://`).
   */
  url: string;
  /** Shown to the server in `session.hello` (default `@dlm/client`). */
  name?: string;
  /** Credentials for `session.hello`; a function is called again on every (re)connection. */
  auth?: string | (() => string | Promise<string>);
  /**
   * The longest any request waits for its reply, counted from the call (time spent waiting for
   * a connection included); an acquire gets its `waitMs` on top. Default 10 000.
   */
  requestTimeoutMs?: number;
  /**
   * How often an idle connection is checked with `session.ping`; a ping without a reply within
   * `requestTimeoutMs` replaces the connection. 0 turns it off. Default 10 000.
   */
  pingIntervalMs?: number;
  /**
   * Backoff for reconnecting after the connection drops: full jitter, the cap doubling from
   * `initialDelayMs` (default 100) up to `maxDelayMs` (default 5 000). `false`: no automatic
   * reconnect; the next request opens a new connection.
   */
  reconnect?: Partial<ReconnectOptions> | false;
  /** A WHATWG-compatible `WebSocket` constructor. Default: `ws` under Node, else the global. */
  WebSocket?: WebSocketConstructor;
  /** Monotonic time and timers; tests inject `createManualClock()` from `@dlm/core`. */
  clock?: Clock;
}

export interface AcquireOptions {
  /** Lease length in ms. The server may grant more (`lease.ttlMs`), never less. */
  ttlMs: number;
  /** How long to wait while another owner holds the lock (server-side, FIFO). Default 0. */
  waitMs?: number;
  /**
   * Stops waiting, rejecting with CANCELLED. The server cannot be told to stop a wait in
   * protocol v1: if the grant arrives anyway, the client releases it at once.
   */
  signal?: AbortSignal;
  /**
   * The owner to acquire as. By default every acquire gets a fresh one, so that two callers
   * sharing this client never both "hold" a lock. Pass the same owner twice to re-enter
   * (same token, TTL refreshed) on purpose.
   */
  owner?: string;
  /** Extend the lease in the background (at a third of its TTL) until it is released. */
  autoExtend?: boolean;
}

export type WithLockOptions = Omit<AcquireOptions, 'autoExtend'>;

/** What `get` reports. */
export type LockInfo =
  | { name: string; held: false }
  | { name: string; held: true; owner: string; token: bigint; ttlRemainingMs: number };

/** A change `watch` reports: the lock's state after it, as the server saw it. */
export interface LockChange {
  name: string;
  held: boolean;
  owner?: string;
  token?: bigint;
}

export interface LockWatch {
  /** Stops the watch. Never rejects. */
  stop(): Promise<void>;
}

/** The server's side of the session: its id, version, backend and limits. */
export type SessionInfo = HelloResult;

export interface ClientEvents {
  /** A session was established; `reconnected` after the first time. */
  connected: { session: SessionInfo; reconnected: boolean };
  /** A connection that had a session went down. */
  disconnected: { code: number; reason: string; willReconnect: boolean };
  /** A lease ended without being released (its `signal` has aborted too). */
  lost: { lease: Lease; reason: LostReason };
  /** Connection failures and background errors nobody else could be told about. */
  error: Error;
}

export interface DlmClient extends AsyncDisposable {
  /** The current session, while connected. */
  readonly session: SessionInfo | undefined;
  /**
   * Connects now instead of on the first request, and resolves with the session. The client
   * otherwise connects lazily; once connected it stays connected (reconnecting after drops)
   * until `close()`.
   */
  connect(): Promise<SessionInfo>;
  /**
   * Acquires `name`, waiting up to `waitMs` while another owner holds it. Rejects with
   * LOCK_HELD when the wait ends without the lock, CANCELLED when `signal` aborts, and
   * UNAVAILABLE (with `indeterminate: true` when the request may have reached the server)
   * when there is no answer.
   *
   * @example
   * const lease = await client.acquire('invoices', { ttlMs: 5_000, waitMs: 2_000 });
   * try {
   *   await db.write({ fencingToken: lease.token });
   * } finally {
   *   await lease.release();
   * }
   */
  acquire(name: string, options: AcquireOptions): Promise<Lease>;
  /**
   * Acquires `name` if it is free now; `null` when another owner holds it.
   *
   * @example
   * const lease = await client.tryAcquire('cron:nightly', { ttlMs: 60_000 });
   * if (!lease) return; // another instance runs it
   */
  tryAcquire(name: string, options: Omit<AcquireOptions, 'waitMs'>): Promise<Lease | null>;
  /**
   * Runs `fn` while holding `name`: acquires, extends the lease in the background while `fn`
   * runs, aborts `fn`'s signal if the lease is lost (or `options.signal` aborts), and releases
   * when `fn` settles, whether it returned or threw. Resolves with `fn`'s value.
   *
   * @example
   * const total = await client.withLock('ledger', { ttlMs: 3_000, waitMs: 10_000 }, async (signal, lease) => {
   *   return await ledger.settle({ fencingToken: lease.token, signal });
   * });
   */
  withLock<T>(
    name: string,
    options: WithLockOptions,
    fn: (signal: AbortSignal, lease: Lease) => Promise<T>,
  ): Promise<T>;
  /** The lock's current holder, as the server sees it. */
  get(name: string): Promise<LockInfo>;
  /**
   * Calls `onChange` with the lock's state now, then on every change, until `stop()`. After a
   * reconnect the watch is set up again and `onChange` gets the state at that moment (changes
   * while disconnected are not replayed).
   *
   * @example
   * const watch = await client.watch('leader', (change) => console.log(change.held, change.owner));
   * // later
   * await watch.stop();
   */
  watch(name: string, onChange: (change: LockChange) => void): Promise<LockWatch>;
  /**
   * Subscribes to a client event; returns the unsubscribe function.
   *
   * @example
   * client.on('lost', ({ lease, reason }) => log.warn(`lost ${lease.name}: ${reason}`));
   */
  on<E extends keyof ClientEvents>(
    event: E,
    listener: (payload: ClientEvents[E]) => void,
  ): () => void;
  /**
   * Releases every lease still held (when connected), ends watches, and closes the connection.
   * Pending requests reject with CANCELLED.
   */
  close(): Promise<void>;
}

interface WatchState {
  name: string;
  onChange: (change: LockChange) => void;
  watchId: string | undefined;
  establishing: boolean;
  stopped: boolean;
}

/** A release or an orphan cleanup to retry once there is a connection again. */
type Cleanup =
  | { kind: 'release'; name: string; token: bigint; untilMs: number }
  | { kind: 'orphan'; name: string; owner: string; untilMs: number };

const DEFAULT_RECONNECT: ReconnectOptions = { initialDelayMs: 100, maxDelayMs: 5_000 };

/**
 * Creates a client for a dlm server. It connects on the first request (or `connect()`),
 * sends `session.hello` first on every connection, and reconnects with backoff when the
 * connection drops. Leases survive a reconnect: the server keeps them until released or
 * expired, so the client can still extend and release them with their tokens.
 *
 * @example
 * import { createClient } from '@dlm/client';
 *
 * const client = createClient({ url: 'ws://localhost:7420' });
 * await using lease = await client.acquire('reports', { ttlMs: 10_000, waitMs: 5_000 });
 * await buildReport(lease.token);
 */
export function createClient(options: ClientOptions): DlmClient {
  const clock = options.clock ?? systemClock;
  const requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
  const events = createEmitter<ClientEvents>((error, event) => {
    if (event !== 'error') events.emit('error', asError(error));
  });
  const leases = new Map<string, Set<LeaseHandle>>();
  const watches = new Set<WatchState>();
  const watchesById = new Map<string, WatchState>();
  let cleanups: Cleanup[] = [];
  let closed = false;

  const connection: Connection = createConnection({
    url: normalizeUrl(options.url),
    WebSocket: options.WebSocket ?? defaultWebSocket(),
    clock,
    requestTimeoutMs,
    pingIntervalMs: options.pingIntervalMs ?? 10_000,
    reconnect: options.reconnect === false ? false : { ...DEFAULT_RECONNECT, ...options.reconnect },
    helloParams: async () => {
      const auth = typeof options.auth === 'function' ? await options.auth() : options.auth;
      return {
        client: { name: options.name ?? '@dlm/client', version: CLIENT_VERSION },
        ...(auth === undefined ? {} : { auth }),
      };
    },
    onReady(session, reconnected) {
      events.emit('connected', { session, reconnected });
      runCleanups();
      for (const watch of watches) {
        if (!watch.stopped && !watch.establishing && watch.watchId === undefined) {
          establish(watch).catch((error: unknown) => events.emit('error', asError(error)));
        }
      }
      for (const set of leases.values()) for (const handle of set) handle.reconnected();
    },
    onDown(event) {
      // Watch ids belong to the session that is gone.
      for (const watch of watches) watch.watchId = undefined;
      watchesById.clear();
      events.emit('disconnected', event);
    },
    onNotification: onNotification,
    onError: (error) => events.emit('error', error),
  });

  const leaseContext: LeaseContext = {
    clock,
    requestTimeoutMs,
    call: connection.call,
    releaseInBackground,
    onEnded(handle) {
      const set = leases.get(handle.key);
      set?.delete(handle);
      if (set?.size === 0) leases.delete(handle.key);
    },
    onLost: (lease, reason) => events.emit('lost', { lease, reason }),
    reportError: (error) => events.emit('error', asError(error)),
  };

  function onNotification(notification: ServerNotification): void {
    if (notification.method === 'lock.lost') {
      const { name, token, reason } = notification.params;
      let key: string;
      try {
        key = leaseKey(name, parseToken(token));
      } catch {
        return;
      }
      for (const handle of [...(leases.get(key) ?? [])]) handle.lose(reason);
    } else if (notification.method === 'lock.changed') {
      const { watchId, name, held, owner, token } = notification.params;
      const watch = watchesById.get(watchId);
      if (!watch || watch.stopped) return;
      deliver(watch, { name, held, owner, token });
    }
  }

  function deliver(
    watch: WatchState,
    change: { name: string; held: boolean; owner?: string | undefined; token?: string | undefined },
  ): void {
    let token: bigint | undefined;
    try {
      token = change.token === undefined ? undefined : parseToken(change.token);
    } catch {}
    try {
      watch.onChange({
        name: change.name,
        held: change.held,
        ...(change.owner === undefined ? {} : { owner: change.owner }),
        ...(token === undefined ? {} : { token }),
      });
    } catch (error) {
      events.emit('error', asError(error));
    }
  }

  async function establish(watch: WatchState): Promise<void> {
    watch.establishing = true;
    try {
      const result = await connection.call('lock.watch', { name: watch.name });
      if (watch.stopped) {
        connection.call('lock.unwatch', { watchId: result.watchId }).catch(() => {});
        return;
      }
      watch.watchId = result.watchId;
      watchesById.set(result.watchId, watch);
      deliver(watch, { name: watch.name, held: result.held, token: result.token });
    } finally {
      watch.establishing = false;
    }
  }

  function releaseInBackground(name: string, token: bigint, ttlMs: number): void {
    const untilMs = clock.now() + ttlMs + driftMarginMs(ttlMs);
    connection
      .call('lock.release', { name, token: token.toString() }, { write: true })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !closed) {
          cleanups.push({ kind: 'release', name, token, untilMs });
        }
      });
  }

  /** An acquire whose reply was lost may have been granted: find out and free it. */
  function cleanUpOrphan(name: string, owner: string, untilMs: number): void {
    connection
      .call('lock.get', { name })
      .then((state) => {
        if (state.held && state.owner === owner) {
          releaseInBackground(name, parseToken(state.token), untilMs - clock.now());
        }
      })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !closed) {
          cleanups.push({ kind: 'orphan', name, owner, untilMs });
        }
      });
  }

  function runCleanups(): void {
    const now = clock.now();
    const due = cleanups.filter((cleanup) => cleanup.untilMs > now);
    cleanups = [];
    for (const cleanup of due) {
      if (cleanup.kind === 'release') {
        releaseInBackground(cleanup.name, cleanup.token, cleanup.untilMs - now);
      } else cleanUpOrphan(cleanup.name, cleanup.owner, cleanup.untilMs);
    }
  }

  /** A grant that arrived after its caller stopped waiting: give it back. */
  function discardGrant(result: ResultOf<'lock.acquire'>, ttlMs: number): void {
    let token: bigint;
    try {
      token = parseToken(result.token);
    } catch {
      return;
    }
    // With a caller-chosen owner this may be a re-entry of a lease still in use here.
    if (leases.has(leaseKey(result.name, token))) return;
    releaseInBackground(result.name, token, ttlMs);
  }

  async function acquire(name: string, acquireOptions: AcquireOptions): Promise<Lease> {
    if (closed) throw closedError();
    const { ttlMs, signal } = acquireOptions;
    const waitMs = acquireOptions.waitMs ?? 0;
    const chosenOwner = acquireOptions.owner !== undefined;
    const owner = acquireOptions.owner ?? freshOwner();
    const params: ParamsOf<'lock.acquire'> = { name, ttlMs, owner };
    if (waitMs > 0) params.waitMs = waitMs;
    let sentAt = Number.NaN;
    const result = await connection.call('lock.acquire', params, {
      write: true,
      timeoutMs: requestTimeoutMs + waitMs,
      ...(signal === undefined ? {} : { signal }),
      onSent: (at) => {
        sentAt = at;
      },
      onLateResult: (late) => discardGrant(late, late.ttlMs),
      onDropped: () => {
        // Only an owner this client made up is known to be nobody else's.
        if (!chosenOwner)
          cleanups.push({ kind: 'orphan', name, owner, untilMs: clock.now() + ttlMs });
      },
    });
    const token = parseToken(result.token);
    let grantedTtlMs = result.ttlMs;
    if (waitMs > 0 && clock.now() - sentAt > grantedTtlMs / 10) {
      // The server granted the lock at some unknown moment during the wait, so the send time
      // says little about when the lease ends. An immediate extend gives a send time that does.
      try {
        const extended = await connection.call(
          'lock.extend',
          { name, token: result.token, ttlMs },
          {
            write: true,
            onSent: (at) => {
              sentAt = at;
            },
          },
        );
        grantedTtlMs = extended.ttlMs;
      } catch (error) {
        if (!isDlmError(error, 'NOT_HOLDER')) releaseInBackground(name, token, grantedTtlMs);
        throw isDlmError(error, 'NOT_HOLDER')
          ? new DlmError('UNAVAILABLE', `the lease on ${JSON.stringify(name)} ran out in transit`, {
              cause: error,
            })
          : error;
      }
    }
    if (clock.now() >= sentAt + grantedTtlMs - driftMarginMs(grantedTtlMs)) {
      releaseInBackground(name, token, grantedTtlMs);
      throw new DlmError(
        'UNAVAILABLE',
        `the grant of ${JSON.stringify(name)} arrived after its lease had run out`,
      );
    }
    const handle = createLease(leaseContext, {
      name: result.name,
      owner: result.owner,
      token,
      ttlMs: grantedTtlMs,
      requestedTtlMs: ttlMs,
      sentAt,
      autoExtend: acquireOptions.autoExtend === true,
    });
    let set = leases.get(handle.key);
    if (!set) {
      set = new Set();
      leases.set(handle.key, set);
    }
    set.add(handle);
    return handle.lease;
  }

  const client: DlmClient = {
    get session() {
      return connection.session;
    },

    async connect() {
      if (closed) throw closedError();
      await connection.call('session.ping', {});
      const session = connection.session;
      if (!session) throw new DlmError('UNAVAILABLE', 'the connection dropped while connecting');
      return session;
    },

    acquire,

    async tryAcquire(name, tryOptions) {
      try {
        return await acquire(name, { ...tryOptions, waitMs: 0 });
      } catch (error) {
        if (isDlmError(error, 'LOCK_HELD')) return null;
        throw error;
      }
    },

    async withLock(name, lockOptions, fn) {
      const lease = await acquire(name, { ...lockOptions, autoExtend: true });
      const signal = lockOptions.signal
        ? AbortSignal.any([lease.signal, lockOptions.signal])
        : lease.signal;
      try {
        return await fn(signal, lease);
      } finally {
        await lease[Symbol.asyncDispose]();
      }
    },

    async get(name) {
      const state = await connection.call('lock.get', { name });
      if (!state.held) return { name: state.name, held: false };
      return {
        name: state.name,
        held: true,
        owner: state.owner,
        token: parseToken(state.token),
        ttlRemainingMs: state.ttlRemainingMs,
      };
    },

    async watch(name, onChange) {
      if (closed) throw closedError();
      const watch: WatchState = {
        name,
        onChange,
        watchId: undefined,
        establishing: false,
        stopped: false,
      };
      watches.add(watch);
      try {
        await establish(watch);
      } catch (error) {
        watches.delete(watch);
        throw error;
      }
      return {
        async stop() {
          if (watch.stopped) return;
          watch.stopped = true;
          watches.delete(watch);
          const { watchId } = watch;
          if (watchId === undefined) return;
          watchesById.delete(watchId);
          await connection.call('lock.unwatch', { watchId }).then(
            () => {},
            () => {},
          );
        },
      };
    },

    on: (event, listener) => events.on(event, listener),

    async close() {
      if (closed) return;
      closed = true;
      const held = [...leases.values()].flatMap((set) => [...set]);
      if (connection.session) {
        await Promise.allSettled(held.map((handle) => handle.lease.release()));
      } else {
        // Releasing needs a session, and close() should not wait for one: the server lets
        // these leases run out.
        for (const handle of held) handle.forget();
      }
      cleanups = [];
      for (const watch of watches) watch.stopped = true;
      watches.clear();
      watchesById.clear();
      await connection.close();
      events.clear();
    },

    [Symbol.asyncDispose]() {
      return client.close();
    },
  };
  return client;
}

function normalizeUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol === 'http:') parsed.protocol = 'ws:';
  else if (parsed.protocol === 'https:') parsed.protocol = 'wss:';
  if (parsed.pathname === '/' || parsed.pathname === '') parsed.pathname = WS_PATH;
  return parsed.toString();
}

function freshOwner(): string {
  return globalThis.crypto.randomUUID();
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

function closedError(): DlmError {
  return new DlmError('CANCELLED', 'the client is closed');
}
