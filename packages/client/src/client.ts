import {
  type Clock,
  createLeaseKey,
  DEFAULT_LIMITS,
  DlmError,
  isDlmError,
  type Limits,
  parseToken,
  type RetryOptions,
  type RetryPolicy,
  retry,
  retryPolicy,
  systemClock,
  validateName,
  validateOwner,
  validateTtl,
  validateWait,
} from '@dlm/core';
import { type MethodName, type ParamsOf, type ResultOf, WS_PATH } from '@dlm/protocol';
import {
  type Connection,
  createConnection,
  type HelloResult,
  type ServerNotification,
} from './connection.js';
import { createEmitter } from './emitter.js';
import {
  type CampaignOptions,
  campaign,
  type Leader,
  type Leadership,
  type ObserveOptions,
  observe,
} from './leadership.js';
import {
  createLease,
  driftMarginMs,
  type Lease,
  type LeaseContext,
  type LeaseHandle,
  type LostReason,
  leaseKey,
} from './lease.js';
import { defaultWebSocket, type TlsOptions, type WebSocketConstructor } from './websocket.js';

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
   * The retry policy of every request (`@dlm/core`'s: attempts, full-jitter exponential backoff,
   * cap, deadline, signal); calls can override it with their own `retry`. Retried: UNAVAILABLE
   * (a dropped connection, a timeout, a backend that is down) and LIMIT_EXCEEDED; LOCK_HELD only
   * with `onLockHeld`. Default `{ attempts: 3, initialDelayMs: 100, maxDelayMs: 2_000 }`;
   * `false`: one try.
   */
  retry?: RetryOptions | false;
  /**
   * The same kind of policy for reconnecting after the connection drops: each connection
   * attempt of an outage waits a full-jitter delay; after `attempts` of them the client stops
   * until the next request. Default `{ attempts: Infinity, initialDelayMs: 100,
   * maxDelayMs: 5_000 }`. `false`: no automatic reconnect; the next request opens a new
   * connection.
   */
  reconnect?: RetryOptions | false;
  /** A WHATWG-compatible `WebSocket` constructor. Default: `ws` under Node, else the global. */
  WebSocket?: WebSocketConstructor;
  /**
   * For `wss://` under Node: `ca`, the PEM certificate(s) of the CA that issued the server's
   * certificate when Node does not trust it already. Passed to `ws`; not used with a
   * `WebSocket` of your own, nor in browsers.
   */
  tls?: TlsOptions;
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
   * (same token, TTL refreshed) on purpose: the client then sends the held lease's key again.
   */
  owner?: string;
  /**
   * The lease's secret key (22-128 characters of `[A-Za-z0-9_-]`, at least 128 random bits).
   * By default the client makes a fresh one per acquire and keeps it to itself (it is not a
   * property of the lease). Pass your own only to re-send an acquire from another process
   * after a lost reply: the same owner and the same key get the same lease back.
   */
  leaseKey?: string;
  /** Extend the lease in the background (at a third of its TTL) until it is released. */
  autoExtend?: boolean;
  /**
   * Overrides the client's `retry` for this acquire. A retry re-sends the acquire with the same
   * owner, so a grant whose reply was lost comes back as the same lease (same token) instead
   * of leaving a second lock behind; a retry waits only for what is left of `waitMs`.
   */
  retry?: RetryOptions | false;
}

export type WithLockOptions = Omit<AcquireOptions, 'autoExtend'>;

/** Options of `get`, `watch` and `connect`. */
export interface RequestOptions {
  /** Overrides the client's `retry` for this call. */
  retry?: RetryOptions | false;
  /** Stops waiting, rejecting with CANCELLED. */
  signal?: AbortSignal;
}

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
  connect(options?: RequestOptions): Promise<SessionInfo>;
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
  get(name: string, options?: RequestOptions): Promise<LockInfo>;
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
  watch(
    name: string,
    onChange: (change: LockChange) => void,
    options?: RequestOptions,
  ): Promise<LockWatch>;
  /**
   * Runs for leadership of `name` and resolves once this client leads (holds the lock).
   * Leadership is renewed in the background; its `signal` aborts the moment it is lost, which
   * is an event (also the client's `lost`), never an exception. `term` is the lock's fencing
   * token: strictly greater than every earlier leader's, so pass it to what the leader writes.
   *
   * @example
   * for (;;) {
   *   const leadership = await client.campaign('scheduler', { ttlMs: 5_000 });
   *   await runScheduler({ term: leadership.term, signal: leadership.signal }); // until lost
   * }
   */
  campaign(name: string, options: CampaignOptions): Promise<Leadership>;
  /**
   * The leader of `name` now and after every change — `{ owner, term }`, or `null` while nobody
   * leads — for followers. Built on `watch`; it survives reconnects.
   *
   * @example
   * for await (const leader of client.observe('scheduler')) {
   *   console.log(leader ? `${leader.owner} leads (term ${leader.term})` : 'no leader');
   * }
   */
  observe(name: string, options?: ObserveOptions): AsyncIterable<Leader | null>;
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
  retry: RetryPolicy;
  watchId: string | undefined;
  establishing: boolean;
  stopped: boolean;
}

/** A release or an orphan cleanup to retry once there is a connection again. */
type Cleanup =
  | { kind: 'release'; name: string; token: bigint; leaseKey: string; untilMs: number }
  | { kind: 'orphan'; name: string; owner: string; leaseKey: string; untilMs: number };

const DEFAULT_RECONNECT: RetryOptions = {
  attempts: Number.POSITIVE_INFINITY,
  initialDelayMs: 100,
  maxDelayMs: 5_000,
};

/** What acquire knows beyond its options. */
interface AcquireInternals {
  /** The owner was made up here (not the caller's), so whatever it holds is nobody else's. */
  ownerIsOurs?: boolean;
}

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
  const clientRetry = retryPolicy(options.retry);
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
    WebSocket: options.WebSocket ?? defaultWebSocket(options.tls),
    clock,
    requestTimeoutMs,
    pingIntervalMs: options.pingIntervalMs ?? 10_000,
    reconnect:
      options.reconnect === false
        ? false
        : retryPolicy(options.reconnect, retryPolicy(DEFAULT_RECONNECT)),
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
    retry: clientRetry,
    limits: serverLimits,
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

  async function establish(watch: WatchState, signal?: AbortSignal): Promise<void> {
    watch.establishing = true;
    try {
      const policy = signal ? retryPolicy({ signal }, watch.retry) : watch.retry;
      const result = await request('lock.watch', { name: watch.name }, policy);
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

  function releaseInBackground(name: string, token: bigint, leaseKey: string, ttlMs: number): void {
    const untilMs = clock.now() + ttlMs + driftMarginMs(ttlMs);
    connection
      .call('lock.release', { name, token: token.toString(), leaseKey }, { write: true })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !closed) {
          cleanups.push({ kind: 'release', name, token, leaseKey, untilMs });
        }
      });
  }

  /** An acquire whose reply was lost may have been granted: find out and free it. */
  function cleanUpOrphan(name: string, owner: string, leaseKey: string, untilMs: number): void {
    connection
      .call('lock.get', { name })
      .then((state) => {
        // Released with the acquire's key: if someone else holds it by now, that is NOT_HOLDER.
        if (state.held && state.owner === owner) {
          releaseInBackground(name, parseToken(state.token), leaseKey, untilMs - clock.now());
        }
      })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !closed) {
          cleanups.push({ kind: 'orphan', name, owner, leaseKey, untilMs });
        }
      });
  }

  function runCleanups(): void {
    const now = clock.now();
    const due = cleanups.filter((cleanup) => cleanup.untilMs > now);
    cleanups = [];
    for (const cleanup of due) {
      if (cleanup.kind === 'release') {
        releaseInBackground(cleanup.name, cleanup.token, cleanup.leaseKey, cleanup.untilMs - now);
      } else cleanUpOrphan(cleanup.name, cleanup.owner, cleanup.leaseKey, cleanup.untilMs);
    }
  }

  /** An acquire by `owner` may have been granted unseen: free it once it can be looked up. */
  function orphaned(
    name: string,
    owner: string,
    leaseKey: string,
    ownerIsOurs: boolean,
    ttlMs: number,
  ): void {
    // Only an owner this client made up is known to be nobody else's.
    if (ownerIsOurs && !closed) {
      cleanups.push({ kind: 'orphan', name, owner, leaseKey, untilMs: clock.now() + ttlMs });
      if (connection.session) runCleanups();
    }
  }

  /** A grant that arrived after its caller stopped waiting: give it back. */
  function discardGrant(result: ResultOf<'lock.acquire'>, secret: string, ttlMs: number): void {
    let token: bigint;
    try {
      token = parseToken(result.token);
    } catch {
      return;
    }
    // With a caller-chosen owner this may be a re-entry of a lease still in use here.
    if (leases.has(leaseKey(result.name, token))) return;
    releaseInBackground(result.name, token, secret, ttlMs);
  }

  /**
   * The bounds requests are checked against: the server's own (from `session.hello`) once there
   * is a session; before that the protocol's defaults, which a default server uses.
   */
  function serverLimits(): Limits {
    const session = connection.session;
    // hello does not report maxOwnerBytes: the protocol's default stands for it.
    return session ? { ...DEFAULT_LIMITS, ...session.limits } : DEFAULT_LIMITS;
  }

  /** The client's policy under a call's `retry` option, with the call's `signal` added. */
  function policyFor(
    retryOptions: RetryOptions | false | undefined,
    signal?: AbortSignal,
  ): RetryPolicy {
    return retryPolicy(retryOptions, signal ? retryPolicy({ signal }, clientRetry) : clientRetry);
  }

  /** A request that is safe to repeat (a read, a watch, a ping), retried under `policy`. */
  function request<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    policy: RetryPolicy,
  ): Promise<ResultOf<M>> {
    return retry(
      (attempt) =>
        connection.call(method, params, {
          timeoutMs: Math.max(1, Math.min(requestTimeoutMs, attempt.remainingMs)),
          // Without a signal in the policy nothing can abort the attempt's: skip it.
          ...(policy.signals.length ? { signal: attempt.signal } : {}),
        }),
      policy,
      { clock },
    );
  }

  async function acquire(
    name: string,
    acquireOptions: AcquireOptions,
    internals: AcquireInternals = {},
  ): Promise<Lease> {
    if (closed) throw closedError();
    // Checked here, before anything is sent, by the same code the server runs: the same code,
    // field and message as the server's answer would have.
    const limits = serverLimits();
    validateName(name, limits);
    const ttlMs = validateTtl(acquireOptions.ttlMs, limits);
    const waitMs = validateWait(acquireOptions.waitMs, limits);
    if (acquireOptions.owner !== undefined) validateOwner(acquireOptions.owner, limits);
    // One owner for every try: the server answers a re-sent acquire by this owner with the lease
    // it already granted (same token), so a grant whose reply was lost is not granted twice.
    const owner = acquireOptions.owner ?? freshOwner();
    const ownerIsOurs = internals.ownerIsOurs ?? acquireOptions.owner === undefined;
    // One key for every try too, for the same reason, and so that a try re-sent on a connection
    // to another server is still recognised. Re-entering as an owner that holds the lock here
    // presents that lease's key.
    const key =
      acquireOptions.leaseKey ??
      (acquireOptions.owner === undefined ? undefined : heldKeyIn(leases, name, owner)) ??
      createLeaseKey();
    const policy = policyFor(acquireOptions.retry, acquireOptions.signal);
    const startedAt = clock.now();
    // Tries that may have been granted without the reply reaching us: a drop or a timeout.
    let outcome: 'pending' | 'granted' | 'failed' = 'pending';
    let grantedToken: string | undefined;
    let maybeGranted = false;
    const lateGrants: ResultOf<'lock.acquire'>[] = [];
    let sentAt = Number.NaN;
    let result: ResultOf<'lock.acquire'>;
    try {
      result = await retry(
        (attempt) => {
          let wait = Math.max(0, waitMs - (clock.now() - startedAt));
          if (Number.isFinite(attempt.remainingMs)) {
            // Leave the reply time to arrive before the overall deadline.
            const replyAllowanceMs = Math.min(requestTimeoutMs, 1_000, attempt.remainingMs / 2);
            wait = Math.min(wait, Math.max(0, attempt.remainingMs - replyAllowanceMs));
          }
          wait = Math.floor(wait);
          const params: ParamsOf<'lock.acquire'> = { name, ttlMs, owner, leaseKey: key };
          if (wait > 0) params.waitMs = wait;
          return connection.call('lock.acquire', params, {
            write: true,
            timeoutMs: Math.max(1, Math.min(requestTimeoutMs + wait, attempt.remainingMs)),
            ...(policy.signals.length ? { signal: attempt.signal } : {}),
            onSent: (at) => {
              sentAt = at;
            },
            onLateResult: (late) => {
              if (outcome === 'pending') lateGrants.push(late);
              // The same token is the lease a later try got: ours, in use.
              else if (outcome === 'failed' || late.token !== grantedToken) {
                discardGrant(late, key, late.ttlMs);
              }
            },
            onDropped: () => {
              if (outcome === 'pending') maybeGranted = true;
              else if (outcome === 'failed') orphaned(name, owner, key, ownerIsOurs, ttlMs);
            },
          });
        },
        policy,
        { clock },
      );
    } catch (error) {
      outcome = 'failed';
      for (const late of lateGrants) discardGrant(late, key, late.ttlMs);
      // Decided only now: while tries went on, a later one could still get this same lease.
      if (maybeGranted) orphaned(name, owner, key, ownerIsOurs, ttlMs);
      throw error;
    }
    outcome = 'granted';
    grantedToken = result.token;
    for (const late of lateGrants) {
      if (late.token !== result.token) discardGrant(late, key, late.ttlMs);
    }
    const token = parseToken(result.token);
    let grantedTtlMs = result.ttlMs;
    if (waitMs > 0 && clock.now() - sentAt > grantedTtlMs / 10) {
      // The server granted the lock at some unknown moment during the wait, so the send time
      // says little about when the lease ends. An immediate extend gives a send time that does.
      try {
        const extended = await connection.call(
          'lock.extend',
          { name, token: result.token, ttlMs, leaseKey: key },
          {
            write: true,
            onSent: (at) => {
              sentAt = at;
            },
          },
        );
        grantedTtlMs = extended.ttlMs;
      } catch (error) {
        if (!isDlmError(error, 'NOT_HOLDER')) releaseInBackground(name, token, key, grantedTtlMs);
        throw isDlmError(error, 'NOT_HOLDER')
          ? new DlmError('UNAVAILABLE', `the lease on ${JSON.stringify(name)} ran out in transit`, {
              cause: error,
            })
          : error;
      }
    }
    if (clock.now() >= sentAt + grantedTtlMs - driftMarginMs(grantedTtlMs)) {
      releaseInBackground(name, token, key, grantedTtlMs);
      throw new DlmError(
        'UNAVAILABLE',
        `the grant of ${JSON.stringify(name)} arrived after its lease had run out`,
      );
    }
    const handle = createLease(leaseContext, {
      name: result.name,
      owner: result.owner,
      token,
      leaseKey: key,
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

    async connect(connectOptions = {}) {
      if (closed) throw closedError();
      await request('session.ping', {}, policyFor(connectOptions.retry, connectOptions.signal));
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

    async get(name, getOptions = {}) {
      validateName(name, serverLimits());
      const state = await request(
        'lock.get',
        { name },
        policyFor(getOptions.retry, getOptions.signal),
      );
      if (!state.held) return { name: state.name, held: false };
      return {
        name: state.name,
        held: true,
        owner: state.owner,
        token: parseToken(state.token),
        ttlRemainingMs: state.ttlRemainingMs,
      };
    },

    async watch(name, onChange, watchOptions = {}) {
      if (closed) throw closedError();
      validateName(name, serverLimits());
      const watch: WatchState = {
        name,
        onChange,
        // The signal bounds setting the watch up, not the watch: not kept for re-establishing.
        retry: policyFor(watchOptions.retry),
        watchId: undefined,
        establishing: false,
        stopped: false,
      };
      watches.add(watch);
      try {
        await establish(watch, watchOptions.signal);
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

    campaign: (name, campaignOptions) =>
      campaign(
        {
          clock,
          retry: clientRetry,
          async maxWaitMs(signal, retry) {
            const session =
              connection.session ??
              (await client.connect({ retry, ...(signal ? { signal } : {}) }));
            return session.limits.maxWaitMs;
          },
          acquireLeaderLease: (leaderName, { ownerIsOurs, signal, ...rest }) =>
            acquire(
              leaderName,
              { ...rest, autoExtend: true, ...(signal ? { signal } : {}) },
              { ownerIsOurs },
            ),
        },
        name,
        campaignOptions,
      ),

    observe: (name, observeOptions) =>
      observe(
        {
          watch: (watchedName, onChange) => client.watch(watchedName, onChange),
          async holder(heldName) {
            const info = await client.get(heldName);
            return info.held ? { owner: info.owner, term: info.token } : null;
          },
          reportError: (error) => events.emit('error', asError(error)),
        },
        name,
        observeOptions,
      ),

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

/**
 * The server's URL as `ws(s)://host:port/path`. A URL that cannot work is INVALID_PARAMS at
 * once, from `createClient`: left to the WebSocket it would only fail on every reconnect, and
 * `localhost:7171` (no scheme) even parses, as scheme `localhost:`.
 */
function normalizeUrl(url: string): string {
  const invalidUrl = (why: string) =>
    new DlmError(
      'INVALID_PARAMS',
      `url must be a ws://, wss://, http:// or https:// URL, got ${JSON.stringify(url)}: ${why}`,
      { field: 'url' },
    );
  if (typeof url !== 'string') throw invalidUrl('not a string');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidUrl(
      /^[\w.-]+:\d+/.test(url) ? `no scheme (did you mean ws://${url}?)` : 'not a URL',
    );
  }
  if (!['ws:', 'wss:', 'http:', 'https:'].includes(parsed.protocol)) {
    throw invalidUrl(
      /^[\w.-]+:\d+/.test(url)
        ? `no scheme (did you mean ws://${url}?)`
        : `unsupported scheme ${parsed.protocol}`,
    );
  }
  if (!parsed.hostname) throw invalidUrl('no host');
  if (parsed.protocol === 'http:') parsed.protocol = 'ws:';
  else if (parsed.protocol === 'https:') parsed.protocol = 'wss:';
  if (parsed.pathname === '/' || parsed.pathname === '') parsed.pathname = WS_PATH;
  return parsed.toString();
}

/** The key of a live lease held here by `owner` on `name`, for a deliberate re-entry. */
function heldKeyIn(
  leases: Map<string, Set<LeaseHandle>>,
  name: string,
  owner: string,
): string | undefined {
  for (const set of leases.values()) {
    for (const handle of set) {
      if (handle.lease.name === name && handle.lease.owner === owner && !handle.lease.lost) {
        return handle.leaseKey;
      }
    }
  }
  return undefined;
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
