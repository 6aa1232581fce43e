import type { Writable } from 'node:stream';
import {
  type Budget,
  backgroundTimer,
  boundedCall,
  budget,
  type Clock,
  corkUntil,
  DlmError,
  getOrCreate,
  settlesWithin,
  systemClock,
  type Timer,
} from '@dlm/core';
import {
  type Client,
  CreateMode,
  createClient,
  type Event,
  Exception,
  type Stat,
  State,
  type Transaction,
} from 'node-zookeeper-client';

/**
 * One ZooKeeper session for the adapter, with every request bounded in time.
 *
 * node-zookeeper-client queues requests while disconnected and sends them whenever it
 * reconnects, and has no per-request timeout. Here a request is only handed to the client
 * while it is connected (waiting for that at most the caller's budget: UNAVAILABLE, not
 * indeterminate, when the wait runs out), and an answer that does not come within the budget
 * gives UNAVAILABLE (`indeterminate` for writes). After a session expiry the client cannot
 * recover, so a new one is created.
 */

/**
 * A budget of time shared by every step of one primitive: core's, re-exported so that the
 * adapter's modules keep one import. Each request sets its timers on the budget's clock.
 */
export { type Budget, budget } from '@dlm/core';

export type SessionState = 'connected' | 'disconnected' | 'expired';

/** A multi-op result: `path` for creates, `stat` for setData. */
export interface OpResult {
  path?: string;
  stat?: Stat;
}

export type Watcher = (event: Event) => void;

/**
 * A multi-op under construction. Versions are exact: node-zookeeper-client's own transaction
 * builder turns version 0 into -1 ("any version"), which would make a versioned delete of a
 * node nobody modified yet unconditional.
 */
export interface Ops {
  create(path: string, data: Buffer, mode: number): Ops;
  /** `version` -1 writes whatever the version. */
  setData(path: string, data: Buffer, version: number): Ops;
  /** `version` -1 deletes whatever the version. */
  remove(path: string, version: number): Ops;
}

function exactOps(transaction: Transaction): Ops {
  const raw = transaction as unknown as { ops: Array<{ version?: number }> };
  const pin = (version: number) => {
    const last = raw.ops[raw.ops.length - 1];
    if (last) last.version = version;
  };
  const ops: Ops = {
    create(path, data, mode) {
      transaction.create(path, data, mode);
      return ops;
    },
    setData(path, data, version) {
      transaction.setData(path, data, version);
      pin(version);
      return ops;
    },
    remove(path, version) {
      transaction.remove(path, version);
      pin(version);
      return ops;
    },
  };
  return ops;
}

export interface ZkSession {
  /** The children's names and the parent's own stat (its data version, mtime…). */
  getChildren(
    limit: Budget,
    path: string,
    watcher?: Watcher,
  ): Promise<{ children: string[]; stat: Stat }>;
  getData(limit: Budget, path: string, watcher?: Watcher): Promise<{ data: Buffer; stat: Stat }>;
  exists(limit: Budget, path: string, watcher?: Watcher): Promise<Stat | null>;
  setData(limit: Budget, path: string, data: Buffer, version?: number): Promise<Stat>;
  /** Creates `path` and its missing ancestors as persistent nodes; existing ones are fine. */
  mkdirp(limit: Budget, path: string): Promise<void>;
  multi(limit: Budget, build: (ops: Ops) => Ops): Promise<OpResult[]>;
  isConnected(): boolean;
  /** The session timeout the server granted (the requested one until connected). */
  sessionTimeoutMs(): number;
  onState(listener: (state: SessionState) => void): () => void;
  close(): Promise<void>;
}

/** ZooKeeper's answer was a definite "no" (NO_NODE, NODE_EXISTS, BAD_VERSION, NOT_EMPTY). */
export function isZkCode(error: unknown, code: number): boolean {
  return error instanceof Exception && error.getCode() === code;
}

const LOGICAL = new Set([
  Exception.NO_NODE,
  Exception.NODE_EXISTS,
  Exception.BAD_VERSION,
  Exception.NOT_EMPTY,
  Exception.NO_CHILDREN_FOR_EPHEMERALS,
]);

/** Errors that prove the request was never applied. */
const NOT_APPLIED = new Set([Exception.SESSION_EXPIRED, Exception.AUTH_FAILED]);

export { CreateMode };

const RECONNECT_WATCHDOG_MS = 1_000;
/** How long close() waits for a session being set up, and for the server to end it. */
const CLOSE_WAIT_MS = 1_000;
/** node-zookeeper-client's ConnectionManager state for "closing": a closed socket is not retried. */
const CLOSING_STATE = -1;

type Callback<T> = (error: Error | Exception | null, value?: T) => void;
type Op<T> = (client: Client, done: Callback<T>) => void;

/** The parts of node-zookeeper-client's internals this adapter reaches into, and why. */
interface ClientInternals {
  connectionManager?: {
    socket?: Writable & { destroy(): void };
    connect(): void;
    setState(state: number): void;
  };
}

const internalsOf = (client: Client) => (client as unknown as ClientInternals).connectionManager;

/**
 * The client of the session and its state: replaced by a new one after a session expiry,
 * watched while disconnected, and closed once.
 */
class Connection {
  readonly listeners = new Set<(state: SessionState) => void>();
  client!: Client;
  closed = false;
  private watchdog: Timer | undefined;
  private closeOnce: Promise<void> | undefined;

  constructor(
    readonly connect: string,
    private readonly sessionTimeoutMs: number,
    readonly clock: Clock,
  ) {
    this.newClient();
  }

  emit(state: SessionState): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(state);
      } catch {}
    }
  }

  connected(): boolean {
    return this.client.getState() === State.SYNC_CONNECTED;
  }

  private newClient(): void {
    const created = createClient(this.connect, {
      sessionTimeout: this.sessionTimeoutMs,
      // Between rounds over all servers the client sleeps up to this long: keep it short so a
      // returning ensemble is used at once.
      spinDelay: 100,
      retries: 0,
    });
    this.client = created;
    created.on('state', (state: State) => this.onClientState(created, state));
    created.connect();
  }

  private onClientState(created: Client, state: State): void {
    if (this.client !== created || this.closed) return;
    if (state === State.SYNC_CONNECTED) {
      this.watchdog?.cancel();
      this.emit('connected');
    } else if (state === State.DISCONNECTED) {
      this.armWatchdog(created);
      this.emit('disconnected');
    } else if (state === State.EXPIRED) {
      // The session and every ephemeral node it owned are gone; this client cannot come
      // back. Start a new session for the requests to come.
      created.close();
      this.newClient();
      this.emit('expired');
    }
  }

  /**
   * node-zookeeper-client waits forever for the answer to its connect request. A server that
   * accepted the TCP connection but never answers leaves it stuck (ZooKeeper 3.8 does that to
   * connections that arrive while it starts up: closing them fails on a NullPointerException
   * and the socket stays open). While disconnected, drop the socket every so often so the
   * client tries afresh — in the same session.
   */
  private armWatchdog(watched: Client): void {
    this.watchdog?.cancel();
    this.watchdog = backgroundTimer(
      this.clock,
      () => {
        if (this.client !== watched || this.closed) return;
        if (watched.getState() === State.SYNC_CONNECTED) return;
        internalsOf(watched)?.socket?.destroy();
        this.armWatchdog(watched);
      },
      RECONNECT_WATCHDOG_MS,
    );
  }

  /** Resolves once connected; UNAVAILABLE (nothing was sent) when the budget runs out first. */
  waitConnected(limit: Budget): Promise<void> {
    if (this.connected()) return Promise.resolve();
    let stopListening = () => {};
    return boundedCall(
      limit.what,
      Math.max(0, limit.remainingMs()),
      () =>
        new Promise<void>((resolve) => {
          const onState = (state: SessionState) => {
            if (state === 'connected') resolve();
          };
          this.listeners.add(onState);
          stopListening = () => this.listeners.delete(onState);
        }),
      { clock: limit.clock, timeoutReason: `not connected to ZooKeeper (${this.connect})` },
    ).finally(() => stopListening());
  }

  /**
   * node-zookeeper-client writes every request to its socket at once, one system call each.
   * Corked for the rest of this turn of the event loop, the requests sent in it (many callers
   * at once; a pipelined pair of reads) leave in one write.
   */
  corkForThisTurn(): void {
    const socket = internalsOf(this.client)?.socket;
    if (socket && typeof socket.cork === 'function') corkUntil(socket, process.nextTick);
  }

  close(): Promise<void> {
    this.closeOnce ??= this.closeSession();
    return this.closeOnce;
  }

  private async closeSession(): Promise<void> {
    const closing = this.client;
    // A session still being set up cannot be closed (the client writes CLOSE_SESSION to a
    // socket it may not have yet): give it a moment to connect first.
    if (!this.connected()) {
      await this.waitConnected(budget('close', CLOSE_WAIT_MS, this.clock)).catch(() => {});
    }
    this.closed = true;
    this.watchdog?.cancel();
    this.listeners.clear();
    if (closing.getState() !== State.SYNC_CONNECTED) stopReconnecting(closing);
    else await endSession(closing, this.clock);
  }
}

/** Never connected (nothing to end on the server): stop the client's reconnecting. */
function stopReconnecting(closing: Client): void {
  const manager = internalsOf(closing);
  if (!manager) return;
  manager.connect = () => {};
  manager.setState(CLOSING_STATE);
  manager.socket?.destroy();
}

/**
 * CLOSE_SESSION ends the session at once (its ephemeral nodes go with it); do not let a dead
 * ensemble hold close() up.
 */
async function endSession(closing: Client, clock: Clock): Promise<void> {
  const disconnected = new Promise<void>((resolve) => {
    closing.once('disconnected', () => resolve());
  });
  closing.close();
  await settlesWithin(clock, disconnected, CLOSE_WAIT_MS);
}

/** One request handed to the client, and its answer awaited within the budget. */
function sendOnce<T>(conn: Connection, limit: Budget, write: boolean, op: Op<T>): Promise<T> {
  return boundedCall(
    limit.what,
    Math.max(0, limit.remainingMs()),
    () =>
      new Promise<T>((resolve, reject) => {
        conn.corkForThisTurn();
        op(conn.client, (error, value) => {
          if (error) reject(error);
          else resolve(value as T);
        });
      }),
    { clock: limit.clock, timeoutReason: 'ZooKeeper did not answer in time', indeterminate: write },
  );
}

/**
 * After a failed request: returns when it is worth sending again (a read whose connection was
 * lost, with time left); otherwise throws what the caller sees — our own errors and ZooKeeper's
 * definite answers as they are, anything else as UNAVAILABLE (`indeterminate` for a write
 * ZooKeeper may have applied).
 */
function resendOrThrow(error: unknown, limit: Budget, write: boolean): void {
  if (error instanceof DlmError) throw error;
  if (error instanceof Exception && LOGICAL.has(error.getCode())) throw error;
  const lost = error instanceof Exception && error.getCode() === Exception.CONNECTION_LOSS;
  if (lost && !write && limit.remainingMs() > 0) return;
  const applied = !(error instanceof Exception && NOT_APPLIED.has(error.getCode()));
  throw new DlmError(
    'UNAVAILABLE',
    `${limit.what}: ${error instanceof Error ? error.message : String(error)}`,
    { cause: error, ...(write && applied ? { indeterminate: true } : {}) },
  );
}

/**
 * Sends one request and waits for its answer within the budget. Reads are sent again after
 * a connection loss; writes are not (the caller decides, knowing what the write was).
 */
async function request<T>(conn: Connection, limit: Budget, write: boolean, op: Op<T>): Promise<T> {
  for (;;) {
    if (conn.closed)
      throw new DlmError('UNAVAILABLE', `${limit.what}: the ZooKeeper backend is closed`);
    await conn.waitConnected(limit);
    try {
      return await sendOnce(conn, limit, write, op);
    } catch (error) {
      resendOrThrow(error, limit, write);
    }
  }
}

/**
 * One node-zookeeper-client watcher per (kind, path), handing each notification to every watcher
 * this session asked for since the last one. The library keeps an EventEmitter per path with a
 * listener per distinct function and warns past ten (MaxListenersExceededWarning); many waiters
 * behind one node (shared holders, a semaphore's queue) are normal here. Each call still passes
 * the one function to the library, so ZooKeeper sets its watch as before; a watcher is called at
 * most once, as ZooKeeper's are.
 */
function watchFanOut() {
  const waiting = new Map<string, Set<Watcher>>();
  const fires = new Map<string, Watcher>();
  const fireOf = (key: string): Watcher =>
    getOrCreate(fires, key, () => (event) => {
      const watchers = waiting.get(key);
      waiting.delete(key);
      for (const watcher of watchers ?? []) watcher(event);
    });
  return (kind: 'children' | 'data' | 'exists', path: string, watcher: Watcher): Watcher => {
    const key = `${kind} ${path}`;
    getOrCreate(waiting, key, () => new Set<Watcher>()).add(watcher);
    return fireOf(key);
  };
}

/** The requests of the session, each a call of node-zookeeper-client through `request`. */
function requests(
  conn: Connection,
): Pick<ZkSession, 'getChildren' | 'getData' | 'exists' | 'setData' | 'mkdirp' | 'multi'> {
  const watched = watchFanOut();
  return {
    getChildren: (limit, path, watcher) =>
      request<{ children: string[]; stat: Stat }>(conn, limit, false, (c, done) => {
        const callback = (error: Error | Exception | null, children: string[], stat: Stat) =>
          done(error, { children: children ?? [], stat });
        if (watcher) c.getChildren(path, watched('children', path, watcher), callback);
        else c.getChildren(path, callback);
      }),
    getData: (limit, path, watcher) =>
      request<{ data: Buffer; stat: Stat }>(conn, limit, false, (c, done) => {
        const callback = (error: Error | Exception | null, data: Buffer, stat: Stat) =>
          done(error, { data: data ?? Buffer.alloc(0), stat });
        if (watcher) c.getData(path, watched('data', path, watcher), callback);
        else c.getData(path, callback);
      }),
    exists: (limit, path, watcher) =>
      request<Stat | null>(conn, limit, false, (c, done) =>
        watcher
          ? c.exists(path, watched('exists', path, watcher), (error, stat) =>
              done(error, stat ?? null),
            )
          : c.exists(path, (error, stat) => done(error, stat ?? null)),
      ),
    setData: (limit, path, data, version = -1) =>
      request<Stat>(conn, limit, true, (c, done) =>
        c.setData(path, data, version, (error, stat) => done(error, stat)),
      ),
    mkdirp: (limit, path) =>
      // Creating what already exists is a no-op, so a lost reply can simply be retried.
      request<string>(conn, limit, false, (c, done) =>
        c.mkdirp(path, (error, created) => done(error, created)),
      ).then(() => {}),
    multi: (limit, build) =>
      request<OpResult[]>(conn, limit, true, (c, done) => {
        const transaction = c.transaction();
        build(exactOps(transaction));
        transaction.commit((error, results: OpResult[]) => done(error, results));
      }),
  };
}

/**
 * Opens the adapter's session. `clock` (default the system's) is where the session's own timers
 * go (the reconnect watchdog, close's time limits); each request's go on its budget's clock.
 */
export function openSession(
  connect: string,
  options: { sessionTimeoutMs: number; clock?: Clock },
): ZkSession {
  const conn = new Connection(connect, options.sessionTimeoutMs, options.clock ?? systemClock);
  const session: Omit<ZkSession, keyof ReturnType<typeof requests>> = {
    isConnected: () => conn.connected(),
    sessionTimeoutMs: () => conn.client.getSessionTimeout(),
    onState(listener) {
      conn.listeners.add(listener);
      return () => conn.listeners.delete(listener);
    },
    close: () => conn.close(),
  };
  return Object.assign(session, requests(conn));
}
