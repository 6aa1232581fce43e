import type { Writable } from 'node:stream';
import { corkUntil, DlmError } from '@dlm/core';
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

/** A budget of time shared by every step of one primitive. */
export interface Budget {
  readonly what: string;
  remainingMs(): number;
}

export function budget(what: string, totalMs: number): Budget {
  const deadline = performance.now() + totalMs;
  return { what, remainingMs: () => deadline - performance.now() };
}

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
/** node-zookeeper-client's ConnectionManager state for "closing": a closed socket is not retried. */
const CLOSING_STATE = -1;

export function openSession(connect: string, options: { sessionTimeoutMs: number }): ZkSession {
  const listeners = new Set<(state: SessionState) => void>();
  let client: Client;
  let closed = false;
  let closeOnce: Promise<void> | undefined;

  function emit(state: SessionState): void {
    for (const listener of [...listeners]) {
      try {
        listener(state);
      } catch {}
    }
  }

  function newClient(): void {
    const created = createClient(connect, {
      sessionTimeout: options.sessionTimeoutMs,
      // Between rounds over all servers the client sleeps up to this long: keep it short so a
      // returning ensemble is used at once.
      spinDelay: 100,
      retries: 0,
    });
    client = created;
    created.on('state', (state: State) => {
      if (client !== created || closed) return;
      if (state === State.SYNC_CONNECTED) {
        clearTimeout(watchdog);
        emit('connected');
      } else if (state === State.DISCONNECTED) {
        armWatchdog(created);
        emit('disconnected');
      } else if (state === State.EXPIRED) {
        // The session and every ephemeral node it owned are gone; this client cannot come
        // back. Start a new session for the requests to come.
        created.close();
        newClient();
        emit('expired');
      }
    });
    created.connect();
  }

  /**
   * node-zookeeper-client waits forever for the answer to its connect request. A server that
   * accepted the TCP connection but never answers leaves it stuck (ZooKeeper 3.8 does that to
   * connections that arrive while it starts up: closing them fails on a NullPointerException
   * and the socket stays open). While disconnected, drop the socket every so often so the
   * client tries afresh — in the same session.
   */
  let watchdog: NodeJS.Timeout | undefined;
  function armWatchdog(watched: Client): void {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => {
      if (client !== watched || closed || watched.getState() === State.SYNC_CONNECTED) return;
      const internals = watched as unknown as {
        connectionManager?: { socket?: { destroy(): void } };
      };
      internals.connectionManager?.socket?.destroy();
      armWatchdog(watched);
    }, RECONNECT_WATCHDOG_MS);
    watchdog.unref();
  }

  newClient();

  const connected = () => client.getState() === State.SYNC_CONNECTED;

  function waitConnected(limit: Budget): Promise<void> {
    if (connected()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const stop = () => {
        clearTimeout(timer);
        listeners.delete(onState);
      };
      const onState = (state: SessionState) => {
        if (state === 'connected') {
          stop();
          resolve();
        }
      };
      const timer = setTimeout(
        () => {
          stop();
          reject(
            new DlmError('UNAVAILABLE', `${limit.what}: not connected to ZooKeeper (${connect})`),
          );
        },
        Math.max(0, limit.remainingMs()),
      );
      listeners.add(onState);
    });
  }

  type Callback<T> = (error: Error | Exception | null, value?: T) => void;

  /**
   * node-zookeeper-client writes every request to its socket at once, one system call each.
   * Corked for the rest of this turn of the event loop, the requests sent in it (many callers
   * at once; a pipelined pair of reads) leave in one write.
   */
  function corkForThisTurn(c: Client): void {
    const socket = (c as unknown as { connectionManager?: { socket?: Writable } }).connectionManager
      ?.socket;
    if (socket && typeof socket.cork === 'function') corkUntil(socket, process.nextTick);
  }

  /**
   * Sends one request and waits for its answer within the budget. Reads are sent again after
   * a connection loss; writes are not (the caller decides, knowing what the write was).
   */
  async function run<T>(
    limit: Budget,
    write: boolean,
    op: (client: Client, done: Callback<T>) => void,
  ): Promise<T> {
    for (;;) {
      if (closed)
        throw new DlmError('UNAVAILABLE', `${limit.what}: the ZooKeeper backend is closed`);
      await waitConnected(limit);
      try {
        return await new Promise<T>((resolve, reject) => {
          const timer = setTimeout(
            () =>
              reject(
                new DlmError('UNAVAILABLE', `${limit.what}: ZooKeeper did not answer in time`, {
                  ...(write ? { indeterminate: true } : {}),
                }),
              ),
            Math.max(0, limit.remainingMs()),
          );
          try {
            corkForThisTurn(client);
            op(client, (error, value) => {
              clearTimeout(timer);
              if (error) reject(error);
              else resolve(value as T);
            });
          } catch (error) {
            clearTimeout(timer);
            reject(error);
          }
        });
      } catch (error) {
        if (error instanceof DlmError) throw error;
        if (error instanceof Exception && LOGICAL.has(error.getCode())) throw error;
        const lost = error instanceof Exception && error.getCode() === Exception.CONNECTION_LOSS;
        if (lost && !write && limit.remainingMs() > 0) continue;
        const applied = !(error instanceof Exception && NOT_APPLIED.has(error.getCode()));
        throw new DlmError(
          'UNAVAILABLE',
          `${limit.what}: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error, ...(write && applied ? { indeterminate: true } : {}) },
        );
      }
    }
  }

  return {
    getChildren: (limit, path, watcher) =>
      run<{ children: string[]; stat: Stat }>(limit, false, (c, done) => {
        const callback = (error: Error | Exception | null, children: string[], stat: Stat) =>
          done(error, { children: children ?? [], stat });
        if (watcher) c.getChildren(path, watcher, callback);
        else c.getChildren(path, callback);
      }),
    getData: (limit, path, watcher) =>
      run<{ data: Buffer; stat: Stat }>(limit, false, (c, done) => {
        const callback = (error: Error | Exception | null, data: Buffer, stat: Stat) =>
          done(error, { data: data ?? Buffer.alloc(0), stat });
        if (watcher) c.getData(path, watcher, callback);
        else c.getData(path, callback);
      }),
    exists: (limit, path, watcher) =>
      run<Stat | null>(limit, false, (c, done) =>
        watcher
          ? c.exists(path, watcher, (error, stat) => done(error, stat ?? null))
          : c.exists(path, (error, stat) => done(error, stat ?? null)),
      ),
    setData: (limit, path, data, version = -1) =>
      run<Stat>(limit, true, (c, done) =>
        c.setData(path, data, version, (error, stat) => done(error, stat)),
      ),
    mkdirp: (limit, path) =>
      // Creating what already exists is a no-op, so a lost reply can simply be retried.
      run<string>(limit, false, (c, done) =>
        c.mkdirp(path, (error, created) => done(error, created)),
      ).then(() => {}),
    multi: (limit, build) =>
      run<OpResult[]>(limit, true, (c, done) => {
        const transaction = c.transaction();
        build(exactOps(transaction));
        transaction.commit((error, results: OpResult[]) => done(error, results));
      }),
    isConnected: connected,
    sessionTimeoutMs: () => client.getSessionTimeout(),
    onState(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close() {
      closeOnce ??= closeSession();
      return closeOnce;
    },
  };

  async function closeSession(): Promise<void> {
    const closing = client;
    // A session still being set up cannot be closed (the client writes CLOSE_SESSION to a
    // socket it may not have yet): give it a moment to connect first.
    if (!connected()) {
      await waitConnected(budget('close', 1_000)).catch(() => {});
    }
    closed = true;
    clearTimeout(watchdog);
    listeners.clear();
    if (closing.getState() !== State.SYNC_CONNECTED) {
      // Never connected (nothing to end on the server): stop the client's reconnecting.
      const manager = (
        closing as unknown as {
          connectionManager?: {
            connect(): void;
            setState(state: number): void;
            socket?: { destroy(): void };
          };
        }
      ).connectionManager;
      if (manager) {
        manager.connect = () => {};
        manager.setState(CLOSING_STATE);
        manager.socket?.destroy();
      }
      return;
    }
    await new Promise<void>((resolve) => {
      // CLOSE_SESSION ends the session at once (its ephemeral nodes go with it); do not let a
      // dead ensemble hold close() up.
      const timer = setTimeout(resolve, 1_000);
      timer.unref();
      closing.once('disconnected', () => {
        clearTimeout(timer);
        resolve();
      });
      closing.close();
    });
  }
}
