import {
  type Clock,
  DlmError,
  isDlmError,
  type LockMode,
  parseToken,
  type RetryOptions,
  validateName,
} from '@dlm/core';
import { acquire } from './acquire.js';
import { acquireAll } from './acquire-all.js';
import { ClientCore } from './client-core.js';
import { askingEach, clockedSignal } from './clocked-signal.js';
import type { HelloResult } from './connection.js';
import { closedError } from './failures.js';
import {
  type CampaignOptions,
  campaign,
  type Leader,
  type Leadership,
  type ObserveOptions,
  observe,
} from './leadership.js';
import type { Lease, LostReason } from './lease.js';
import type { LeaseGroup } from './lease-group.js';
import type { LockSpec } from './lock-specs.js';
import {
  type ReleaseRequestResult,
  type RequestReleaseOptions,
  requestRelease,
} from './release-requests.js';
import {
  createReadWriteLock,
  createSemaphore,
  type ReadWriteLock,
  type Semaphore,
} from './semaphore.js';
import type { TlsOptions, WebSocketConstructor } from './websocket.js';

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
  /**
   * Multi-message frames (protocol extension): `"multi"` (the default) asks the server in
   * `session.hello`, and where it agrees, the requests issued in one turn of the event loop go
   * out in one frame and the server's replies ready together come back in one. `"single"`: one
   * message per frame, as every v1 client. A server that predates them is spoken to one message
   * per frame either way.
   */
  frames?: 'multi' | 'single';
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
   * While the acquire waits: called with its 1-based place among the waiters when it starts
   * waiting and whenever that place changes (the server's `lock.queued`; the acquire is sent
   * with `progress: true`). Never called for a lock that was free. A retried acquire queues
   * again, at the back.
   */
  onQueued?: (position: number) => void;
  /**
   * `exclusive` (the default): the only holder. `shared`: one of up to `limit` holders at once,
   * none of them exclusive — a read lock without `limit`, a semaphore's permit with it (see
   * `semaphore` and `readWriteLock`, which set these for you).
   */
  mode?: LockMode;
  /**
   * Only with `mode: 'shared'`: the most holders at once, 1 to the server's `maxHolders`
   * (10,000; the default: a read lock). Every holder of a name must ask for the same limit:
   * another is INVALID_PARAMS, field `limit`, with `error.details.limit` the holders' one.
   */
  limit?: number;
  /**
   * When the lock is held and this acquire has to wait (`waitMs` > 0), ask its holders to let go
   * (as `requestRelease` does, without a reason), once, when the wait starts.
   */
  requestRelease?: boolean;
  /**
   * Lock-delay, in ms (0, the default, to the server's `maxLockDelayMs`, 60,000): when this lease
   * ends by expiry or revocation (a holder that stalled or lost its connection), nobody is
   * granted the name until this long after the end, so a holder that has not noticed yet is
   * done before the next one starts. A release ends it with no delay. Exclusive locks only;
   * servers whose backend keeps no lock-delays announce `maxLockDelayMs` 0 and refuse it
   * (INVALID_PARAMS, field `lockDelayMs`). Meanwhile a try-lock fails with LOCK_HELD and
   * `error.details.lockDelayRemainingMs`, and `get` says `lockDelayRemainingMs`.
   */
  lockDelayMs?: number;
  /**
   * A cap on holding, in ms (`ttlMs` to the server's `maxHoldMs`, 7 days by default; absent:
   * none): no extend keeps the lease past its grant plus this. An extend that would is granted up
   * to the cap only (`lease.ttlMs` says how much, and auto-extend stops there), and at the cap
   * the lease is lost with reason `maxHold`; the server counts such ends, so a holder renewing
   * forever shows. Exclusive locks only; servers whose backend keeps no caps announce
   * `maxHoldMs` 0 and refuse it (INVALID_PARAMS, field `maxHoldMs`).
   */
  maxHoldMs?: number;
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

/**
 * How many acquires wait for a lock (`get`), and across what: `backend`, every server's (the
 * backend keeps one shared queue it can count), or `server`, the answering server's only.
 * Absent from servers that predate it.
 */
export interface WaitersInfo {
  waiters?: number;
  waitersScope?: 'backend' | 'server';
}

/** What `get` reports. */
export type LockInfo =
  | ({
      name: string;
      held: false;
      /** Free, but in its lock-delay (see `AcquireOptions.lockDelayMs`) for this long yet. */
      lockDelayRemainingMs?: number;
    } & WaitersInfo)
  | ({
      name: string;
      held: true;
      /** The owner, token and lease left of the holder with the highest token. */
      owner: string;
      token: bigint;
      ttlRemainingMs: number;
      /** How it is held (`exclusive` from servers that predate shared modes). */
      mode: LockMode;
      /** Shared only: the limit its holders agreed on. */
      limit?: number;
      /** Every holder, ordered by token (the one holder, when exclusive). */
      holders: LockHolder[];
    } & WaitersInfo);

/** One holder of a lock, as `get` lists it. */
export interface LockHolder {
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
}

/**
 * A change `watch` reports: the lock's state after it, as the server saw it. One change per
 * holder's grant and end: a grant names the holder (`owner`, `token`, `mode`); `holders` is how
 * many hold it after the change, when the server says.
 */
export interface LockChange {
  name: string;
  held: boolean;
  owner?: string;
  token?: bigint;
  mode?: LockMode;
  holders?: number;
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
  /** Someone asked the holder of `lease` to let go (its `releaseRequested` has aborted too). */
  releaseRequested: { lease: Lease; reason?: string };
  /**
   * A lease's validity left fell below a third of its TTL while its extends are failing (see
   * `Lease.on('expiring')`): it will be lost unless an extend gets through.
   */
  expiring: { lease: Lease; remainingMs: number };
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
   * Acquires every lock of `locks` (names, or `{ name, mode }` specs), all or nothing: the
   * server takes them in one canonical order, so concurrent calls over overlapping sets cannot
   * deadlock, and when one cannot be had (LOCK_HELD at the end of `waitMs`, UNAVAILABLE,
   * CANCELLED; `error.details.name` names it) it releases the ones it took before answering.
   * 1 to the server's `maxLocksPerRequest` (64) distinct names; a spec `{ name, mode: 'shared',
   * limit? }` takes that name shared (as `acquire` with those options).
   * Every lease has its own token and shares the call's owner, key, TTL and `autoExtend`.
   * Retried like `acquire`, with the same owner and key on every try.
   *
   * @example
   * await using group = await client.acquireAll(['accounts/a', 'accounts/b'], { ttlMs: 10_000, waitMs: 5_000 });
   * const [from, to] = group.leases;
   * await transfer({ fromToken: from.token, toToken: to.token, signal: group.signal });
   */
  acquireAll(locks: readonly (string | LockSpec)[], options: AcquireOptions): Promise<LeaseGroup>;
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
    fn: (signal: AbortSignal, lease: Lease, releaseRequested: AbortSignal) => Promise<T>,
  ): Promise<T>;
  /**
   * Runs `fn` while holding every lock of `locks` (taken as `acquireAll` takes them): every
   * lease is extended in the background while `fn` runs, `fn`'s signal aborts when any of them
   * is lost (or `options.signal` aborts), and all are released when `fn` settles.
   *
   * @example
   * await client.withLock(['stock/42', 'orders/7'], { ttlMs: 3_000, waitMs: 10_000 }, async (signal, group) => {
   *   await ship({ tokens: group.leases.map((lease) => lease.token), signal });
   * });
   */
  withLock<T>(
    locks: readonly (string | LockSpec)[],
    options: WithLockOptions,
    fn: (signal: AbortSignal, group: LeaseGroup, releaseRequested: AbortSignal) => Promise<T>,
  ): Promise<T>;
  /**
   * A semaphore of `limit` permits on `name`: each permit is a shared lease of the name, and at
   * most `limit` are held at once, across every client of the server's backend. Every user of
   * the name must agree on `limit` (another is INVALID_PARAMS, field `limit`). Checks `limit`
   * here (an integer in [1, maxHolders]); talks to the server only when a permit is asked for.
   *
   * @example
   * const pool = client.semaphore('gpu-pool', 4);
   * await pool.withPermit({ ttlMs: 30_000, waitMs: 60_000 }, async (signal, permit) => {
   *   await train({ signal, fencingToken: permit.token });
   * });
   * const permit = await pool.tryAcquire({ ttlMs: 30_000 }); // null when all 4 are held
   */
  semaphore(name: string, limit: number): Semaphore;
  /**
   * A read-write lock on `name`: any number of readers at once (shared leases), or one writer
   * (an exclusive lease). Requests are served first come first served across both kinds, so a
   * waiting writer is not starved by readers that keep arriving.
   *
   * @example
   * const config = client.readWriteLock('config');
   * const value = await config.withRead({ ttlMs: 5_000, waitMs: 5_000 }, () => load());
   * await config.withWrite({ ttlMs: 5_000, waitMs: 10_000 }, async (signal, lease) => {
   *   await save(next, { fencingToken: lease.token, signal });
   * });
   */
  readWriteLock(name: string): ReadWriteLock;
  /** The lock's current holders, as the server sees them. */
  get(name: string, options?: RequestOptions): Promise<LockInfo>;
  /**
   * Asks every current holder of `name` to let go, on any server sharing the backend: each
   * holder's `lease.releaseRequested` aborts. Nothing is released; an operator's revoke is the
   * forced form. Needs the `lock` permission on `name`. `notified`: the holders asked.
   *
   * @example
   * const { notified } = await client.requestRelease('reports', { reason: 'deploy' });
   */
  requestRelease(name: string, options?: RequestReleaseOptions): Promise<ReleaseRequestResult>;

  /**
   * Whether a lease with `token` holds `name` now (for a shared name: `token` is among its
   * holders), as the backend says, on any server of the deployment (`lock.check`). For a
   * resource that cannot store a token but can ask before it acts: a holder paused past its
   * lease reads false. A malformed token is INVALID_PARAMS (field `token`).
   *
   * @example
   * if (!(await client.check('jobs/nightly', tokenFromRequest))) throw new Error('stale holder');
   */
  check(name: string, token: bigint | string, options?: RequestOptions): Promise<boolean>;
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
  const core = new ClientCore(options);
  const client: DlmClient = {
    get session() {
      return core.connection.session;
    },
    connect: (connectOptions) => connect(core, connectOptions),
    acquire: (name, acquireOptions) => acquire(core, name, acquireOptions),
    tryAcquire: (name, tryOptions) => tryAcquire(core, name, tryOptions),
    acquireAll: (locks, acquireOptions) => acquireAll(core, locks, acquireOptions),
    withLock: <T>(
      target: string | readonly (string | LockSpec)[],
      lockOptions: WithLockOptions,
      fn: (signal: AbortSignal, held: never, releaseRequested: AbortSignal) => Promise<T>,
    ) => withLock(core, target, lockOptions, fn),
    requestRelease: (name, requestOptions) => requestRelease(core, name, requestOptions),
    semaphore: (name, limit) => createSemaphore(client, core.limits(), name, limit),
    readWriteLock: (name) => createReadWriteLock(client, core.limits(), name),
    get: (name, getOptions) => get(core, name, getOptions),
    check: (name, token, checkOptions) => check(core, name, token, checkOptions),
    watch: (name, onChange, watchOptions = {}) => core.watches.start(name, onChange, watchOptions),
    campaign: (name, campaignOptions) => campaignFor(core, client, name, campaignOptions),
    observe: (name, observeOptions) => observeFor(core, client, name, observeOptions),
    on: (event, listener) => core.events.on(event, listener),
    close: () => close(core),
    [Symbol.asyncDispose]: () => client.close(),
  };
  return client;
}

async function connect(core: ClientCore, options: RequestOptions = {}): Promise<SessionInfo> {
  if (core.closed) throw closedError();
  await core.request('session.ping', {}, core.policyFor(options.retry, options.signal));
  const { session } = core.connection;
  if (!session) throw new DlmError('UNAVAILABLE', 'the connection dropped while connecting');
  return session;
}

async function tryAcquire(
  core: ClientCore,
  name: string,
  options: Omit<AcquireOptions, 'waitMs'>,
): Promise<Lease | null> {
  try {
    return await acquire(core, name, Object.assign({}, options, { waitMs: 0 }));
  } catch (error) {
    if (isDlmError(error, 'LOCK_HELD')) return null;
    throw error;
  }
}

/**
 * Both `withLock` overloads. `fn` takes the `Lease` of one name or the `LeaseGroup` of several,
 * which the overloads tie to `target`; here it is typed to accept what either is given.
 */
async function withLock<T>(
  core: ClientCore,
  target: string | readonly (string | LockSpec)[],
  options: WithLockOptions,
  fn: (signal: AbortSignal, held: never, releaseRequested: AbortSignal) => Promise<T>,
): Promise<T> {
  const held: Lease | LeaseGroup =
    typeof target === 'string'
      ? await acquire(core, target, Object.assign({}, options, { autoExtend: true }))
      : await acquireAll(core, target, Object.assign({}, options, { autoExtend: true }));
  const sources = options.signal ? [held.signal, options.signal] : undefined;
  const signal = sources
    ? clockedSignal(AbortSignal.any(sources), askingEach(sources))
    : held.signal;
  try {
    return await fn(signal, held as never, held.releaseRequested);
  } finally {
    await held[Symbol.asyncDispose]();
  }
}

async function get(
  core: ClientCore,
  name: string,
  options: RequestOptions = {},
): Promise<LockInfo> {
  validateName(name, core.limits());
  const state = await core.request(
    'lock.get',
    { name },
    core.policyFor(options.retry, options.signal),
  );
  const waiters: WaitersInfo = Object.assign(
    {},
    state.waiters === undefined ? {} : { waiters: state.waiters },
    state.waitersScope === undefined ? {} : { waitersScope: state.waitersScope },
  );
  if (!state.held) {
    const delay = state.lockDelayRemainingMs;
    return {
      name: state.name,
      held: false,
      ...waiters,
      ...(delay === undefined ? {} : { lockDelayRemainingMs: delay }),
    };
  }
  const token = parseToken(state.token);
  const holders = (state.holders ?? [state]).map((holder) => ({
    owner: holder.owner,
    token: holder === state ? token : parseToken(holder.token),
    ttlRemainingMs: holder.ttlRemainingMs,
  }));
  return {
    name: state.name,
    held: true,
    owner: state.owner,
    token,
    ttlRemainingMs: state.ttlRemainingMs,
    mode: state.mode ?? 'exclusive',
    ...(state.limit === undefined ? {} : { limit: state.limit }),
    holders,
    ...waiters,
  };
}

async function check(
  core: ClientCore,
  name: string,
  token: bigint | string,
  options: RequestOptions = {},
): Promise<boolean> {
  validateName(name, core.limits());
  const checked = parseToken(token);
  const answer = await core.request(
    'lock.check',
    { name, token: checked.toString() },
    core.policyFor(options.retry, options.signal),
  );
  return answer.current;
}

function campaignFor(
  core: ClientCore,
  client: DlmClient,
  name: string,
  options: CampaignOptions,
): Promise<Leadership> {
  return campaign(
    {
      clock: core.clock,
      retry: core.retry,
      async maxWaitMs(signal, retry) {
        const session =
          core.connection.session ??
          (await client.connect({ retry, ...(signal ? { signal } : {}) }));
        return session.limits.maxWaitMs;
      },
      acquireLeaderLease: (leaderName, { ownerIsOurs, signal, ...rest }) =>
        acquire(
          core,
          leaderName,
          Object.assign({}, rest, { autoExtend: true, ...(signal ? { signal } : {}) }),
          { ownerIsOurs },
        ),
    },
    name,
    options,
  );
}

function observeFor(
  core: ClientCore,
  client: DlmClient,
  name: string,
  options: ObserveOptions | undefined,
): AsyncIterable<Leader | null> {
  return observe(
    {
      watch: (watchedName, onChange) => client.watch(watchedName, onChange),
      async holder(heldName) {
        const info = await client.get(heldName);
        return info.held ? { owner: info.owner, term: info.token } : null;
      },
      reportError: (error) => core.reportError(error),
    },
    name,
    options,
  );
}

async function close(core: ClientCore): Promise<void> {
  if (core.closed) return;
  core.closed = true;
  const held = core.held.all();
  if (core.connection.session) {
    await Promise.allSettled(held.map((handle) => handle.lease.release()));
  } else {
    // Releasing needs a session, and close() should not wait for one: the server lets these
    // leases run out.
    for (const handle of held) handle.forget();
  }
  core.cleanup.clear();
  core.watches.stopAll();
  await core.connection.close();
  core.events.clear();
}
