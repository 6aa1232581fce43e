import {
  type Backoff,
  type Clock,
  type Corkable,
  corkUntil,
  createBackoff,
  DlmError,
  type RetryPolicy,
  type Timer,
} from '@dlm/core';
import {
  fromRpcError,
  type MethodName,
  type NotificationName,
  type NotificationParams,
  type ParamsOf,
  type ResultOf,
  type RpcErrorObject,
  SUBPROTOCOL,
} from '@dlm/protocol';
import { deadlineQueue } from './deadline-queue.js';
import { OPEN, type WebSocketConstructor, type WebSocketLike } from './websocket.js';

export type HelloResult = ResultOf<'session.hello'>;

/** A server notification, discriminated by `method`. */
export type ServerNotification = {
  [N in NotificationName]: { method: N; params: NotificationParams<N> };
}[NotificationName];

export interface ConnectionOptions {
  url: string;
  WebSocket: WebSocketConstructor;
  clock: Clock;
  requestTimeoutMs: number;
  pingIntervalMs: number;
  /**
   * How to reconnect after a drop (core's retry policy): every connection attempt of an outage
   * waits a full-jitter delay first; `attempts` connection attempts per outage, then the
   * connection gives up until the next request. `false`: never on its own.
   */
  reconnect: RetryPolicy | false;
  helloParams(): ParamsOf<'session.hello'> | Promise<ParamsOf<'session.hello'>>;
  onReady(session: HelloResult, reconnected: boolean): void;
  /** A connection that had a session went down. */
  onDown(event: { code: number; reason: string; willReconnect: boolean }): void;
  onNotification(notification: ServerNotification): void;
  onError(error: DlmError): void;
}

export interface CallOptions<R> {
  /** Defaults to the connection's `requestTimeoutMs`, counted from the call, queueing included. */
  timeoutMs?: number;
  /** The server may apply it even when its reply is lost: such failures are `indeterminate`. */
  write?: boolean;
  /** Stops waiting (CANCELLED). A request already sent is not withdrawn: see `onLateResult`. */
  signal?: AbortSignal;
  /** When the request frame goes out, on the clock's time. */
  onSent?(sentAt: number): void;
  /** A success reply that arrived after the caller stopped waiting (timeout or abort). */
  onLateResult?(result: R): void;
  /** The request was sent and its connection went down before any reply came. */
  onDropped?(): void;
}

export interface Connection {
  /** The current session, while connected. */
  readonly session: HelloResult | undefined;
  call<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    options?: CallOptions<ResultOf<M>>,
  ): Promise<ResultOf<M>>;
  /** Fails every request with CANCELLED and closes the socket; final. */
  close(): Promise<void>;
}

interface Pending {
  id: number;
  frame: string;
  sent: boolean;
  /** The caller still waits for this reply (false after a timeout or an abort). */
  waiting: boolean;
  resolve(result: unknown): void;
  reject(error: DlmError): void;
  options: CallOptions<unknown>;
}

type State = 'idle' | 'connecting' | 'ready' | 'backoff' | 'closed';

/**
 * One logical connection to the server: a WebSocket that is opened on demand, greeted with
 * `session.hello` before anything else, and replaced (with backoff) when it drops. Requests are
 * multiplexed by id; requests made while there is no session wait in a queue, bounded by their
 * timeout.
 */
export function createConnection(options: ConnectionOptions): Connection {
  const { clock, requestTimeoutMs } = options;
  const timeouts = deadlineQueue(clock, requestTimeoutMs);
  let state: State = 'idle';
  let socket: WebSocketLike | undefined;
  let session: HelloResult | undefined;
  let everReady = false;
  /** The current outage's backoff; a new one after every session. */
  let backoff: Backoff | undefined;
  let nextId = 1;
  const queue: Pending[] = [];
  const inflight = new Map<number, Pending>();
  let connectTimer: Timer | undefined;
  let backoffTimer: Timer | undefined;
  let pingTimer: Timer | undefined;
  /** Why the last connection attempt failed, while there is no session: said in every error. */
  let lastFailure: { reason: string; cause: unknown } | undefined;

  function open(): void {
    if (socket || state === 'closed') return;
    backoffTimer?.cancel();
    state = 'connecting';
    let ws: WebSocketLike;
    try {
      ws = new options.WebSocket(options.url, SUBPROTOCOL);
    } catch (error) {
      lastFailure = { reason: describeFailure(error), cause: error };
      options.onError(unavailable(`cannot open ${options.url}: ${lastFailure.reason}`, error));
      down(1006, 'could not open the WebSocket');
      return;
    }
    socket = ws;
    // Bounds the TCP connect, the WebSocket handshake and the hello together.
    connectTimer = clock.setTimer(() => {
      if (socket === ws) {
        lastFailure = {
          reason: `no session within ${requestTimeoutMs} ms (connect, upgrade and hello)`,
          cause: undefined,
        };
        options.onError(unavailable(`no session with ${options.url}: ${lastFailure.reason}`));
        drop(ws, 'connect timeout');
      }
    }, requestTimeoutMs);
    ws.addEventListener('open', () => {
      if (socket === ws) void greet(ws);
    });
    ws.addEventListener('message', (event) => {
      if (socket === ws) onMessage(event.data);
    });
    ws.addEventListener('error', (event) => {
      if (socket === ws) {
        const cause = event.error ?? event.message;
        if (state === 'connecting') lastFailure = { reason: describeFailure(cause), cause };
        options.onError(
          unavailable(`connection to ${options.url} failed: ${describeFailure(cause)}`, cause),
        );
      }
    });
    ws.addEventListener('close', (event) => {
      if (socket === ws) down(event.code, event.reason);
    });
  }

  async function greet(ws: WebSocketLike): Promise<void> {
    let params: ParamsOf<'session.hello'>;
    try {
      params = await options.helloParams();
    } catch (error) {
      if (socket !== ws) return;
      fatal(
        ws,
        new DlmError('UNAUTHENTICATED', `auth failed: ${messageOf(error)}`, { cause: error }),
      );
      return;
    }
    if (socket !== ws) return;
    const id = nextId++;
    const hello: Pending = {
      id,
      frame: frame(id, 'session.hello', params),
      sent: true,
      waiting: true,
      resolve: (result) => {
        if (socket !== ws) return;
        connectTimer?.cancel();
        lastFailure = undefined;
        session = result as HelloResult;
        state = 'ready';
        backoff = undefined;
        const reconnected = everReady;
        everReady = true;
        schedulePing(ws);
        for (const pending of queue.splice(0)) send(ws, pending);
        options.onReady(session, reconnected);
      },
      reject: (error) => {
        if (socket !== ws) return;
        // A refused hello (bad credentials, wrong protocol) will be refused again: stop, and
        // let the next request try afresh. A transient one goes through the backoff.
        if (error.retryable) {
          options.onError(error);
          drop(ws, 'hello failed');
        } else fatal(ws, error);
      },
      options: {},
    };
    inflight.set(id, hello);
    transmit(ws, hello);
  }

  /** A failure that retrying will not fix: every waiting request gets it, no reconnect. */
  function fatal(ws: WebSocketLike, error: DlmError): void {
    const wasReady = state === 'ready';
    closeQuietly(ws, 1000, 'hello refused');
    teardown(error.message);
    if (state === 'closed') return;
    state = 'idle';
    backoff = undefined;
    for (const pending of queue.splice(0)) settle(pending, error);
    // Callbacks last: a listener may call into the client, which must see the new state.
    options.onError(error);
    if (wasReady) options.onDown({ code: 1000, reason: error.message, willReconnect: false });
  }

  /** Gives up on a socket now, without waiting for a closing handshake that may never come. */
  function drop(ws: WebSocketLike, reason: string): void {
    if (socket !== ws) return;
    closeQuietly(ws, 4000, reason);
    down(1006, reason);
  }

  /** Forgets the socket and fails what was sent on it; the caller sets the next state. */
  function teardown(reason: string): void {
    socket = undefined;
    session = undefined;
    connectTimer?.cancel();
    pingTimer?.cancel();
    for (const pending of inflight.values()) {
      pending.options.onDropped?.();
      settle(
        pending,
        unavailable(
          `connection lost before the reply (${reason})`,
          undefined,
          pending.options.write === true,
        ),
      );
    }
    inflight.clear();
  }

  function down(code: number, reason: string): void {
    const wasReady = state === 'ready';
    teardown(reason || `close code ${code}`);
    if (state === 'closed') return;
    const willReconnect = options.reconnect !== false && scheduleReconnect(options.reconnect);
    if (!willReconnect) {
      state = 'idle';
      const error = unavailable(
        (options.reconnect === false
          ? `not connected to ${options.url} (reconnect is off)`
          : `gave up reconnecting to ${options.url} after ${backoff?.retries ?? 0} attempts`) +
          (lastFailure ? `: ${lastFailure.reason}` : ''),
        lastFailure?.cause,
      );
      backoff = undefined;
      for (const pending of queue.splice(0)) settle(pending, error);
    }
    // Callbacks last: a listener may call into the client, which must see the new state.
    if (wasReady) options.onDown({ code, reason, willReconnect });
  }

  /** Books the next connection attempt of this outage; false when the policy says stop. */
  function scheduleReconnect(policy: RetryPolicy): boolean {
    // Every attempt of an outage is delayed, the first included: clients dropped together by a
    // server restart must not all come back in the same instant.
    backoff ??= createBackoff(policy, { clock, retries: policy.attempts });
    const delayMs = backoff.next();
    if (delayMs === undefined) return false;
    state = 'backoff';
    backoffTimer = clock.setTimer(() => {
      backoffTimer = undefined;
      if (state === 'backoff') open();
    }, delayMs);
    return true;
  }

  function schedulePing(ws: WebSocketLike): void {
    if (options.pingIntervalMs <= 0) return;
    pingTimer = clock.setTimer(() => {
      if (socket !== ws) return;
      call('session.ping', {}).then(
        () => {
          if (socket === ws) schedulePing(ws);
        },
        () => {
          // No reply in time on a socket that still looks open: it is half-open or the server
          // is stuck. Replace it rather than let every later request time out too.
          if (socket === ws) drop(ws, 'ping timeout');
        },
      );
    }, options.pingIntervalMs);
  }

  function onMessage(data: unknown): void {
    if (typeof data !== 'string') {
      options.onError(new DlmError('INVALID_REQUEST', 'the server sent a binary frame'));
      return;
    }
    let message: unknown;
    try {
      message = JSON.parse(data);
    } catch (error) {
      options.onError(
        new DlmError('PARSE_ERROR', 'the server sent invalid JSON', { cause: error }),
      );
      return;
    }
    if (typeof message !== 'object' || message === null) return;
    const { id, method, params, result, error } = message as Record<string, unknown>;
    if (typeof id === 'number' || typeof id === 'string') {
      const pending = inflight.get(id as number);
      if (!pending) return;
      inflight.delete(id as number);
      if (isRpcError(error)) settle(pending, fromRpcError(error));
      else if (pending.waiting) {
        pending.waiting = false;
        pending.resolve(result);
      } else pending.options.onLateResult?.(result);
    } else if (typeof method === 'string' && typeof params === 'object' && params !== null) {
      options.onNotification({ method, params } as ServerNotification);
    } else if (isRpcError(error)) {
      // id null: the server could not tell which request this answers.
      options.onError(fromRpcError(error));
    }
  }

  function settle(pending: Pending, error: DlmError): void {
    if (!pending.waiting) return;
    pending.waiting = false;
    pending.reject(error);
  }

  /**
   * Under Node's `ws`, holds the TCP socket's writes until the current turn's promise jobs have
   * run, so requests sent in one turn leave in one write instead of one syscall each.
   */
  function cork(ws: WebSocketLike): void {
    const raw = (ws as { _socket?: Partial<Corkable> })._socket;
    if (typeof raw?.cork !== 'function' || typeof raw.uncork !== 'function') return;
    corkUntil(raw as Corkable, process.nextTick);
  }

  function transmit(ws: WebSocketLike, pending: Pending): void {
    if (ws.readyState !== OPEN) return; // its close event is on the way and fails the request
    try {
      cork(ws);
      ws.send(pending.frame);
    } catch {
      drop(ws, 'send failed');
    }
  }

  function send(ws: WebSocketLike, pending: Pending): void {
    pending.sent = true;
    inflight.set(pending.id, pending);
    pending.options.onSent?.(clock.now());
    transmit(ws, pending);
  }

  function call<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    callOptions: CallOptions<ResultOf<M>> = {},
  ): Promise<ResultOf<M>> {
    if (state === 'closed') return Promise.reject(closedError());
    const { signal } = callOptions;
    if (signal?.aborted) return Promise.reject(cancelled());
    return new Promise<ResultOf<M>>((resolve, reject) => {
      const id = nextId++;
      const timeoutMs = callOptions.timeoutMs ?? requestTimeoutMs;
      let cancelTimeout: (() => void) | undefined;
      let onAbort: (() => void) | undefined;
      const finish = () => {
        cancelTimeout?.();
        if (onAbort) signal?.removeEventListener('abort', onAbort);
      };
      const pending: Pending = {
        id,
        frame: frame(id, method, params),
        sent: false,
        waiting: true,
        resolve: (result) => {
          finish();
          resolve(result as ResultOf<M>);
        },
        reject: (error) => {
          finish();
          reject(error);
        },
        options: callOptions as CallOptions<unknown>,
      };
      const stopWaiting = (error: DlmError) => {
        const queued = queue.indexOf(pending);
        if (queued >= 0) queue.splice(queued, 1);
        settle(pending, error);
      };
      const onTimeout = () => {
        stopWaiting(
          pending.sent
            ? unavailable(
                `no reply to ${method} within ${timeoutMs} ms`,
                undefined,
                callOptions.write === true,
              )
            : unavailable(
                `no session with ${options.url} within ${Math.round(timeoutMs)} ms${lastFailure ? `: ${lastFailure.reason}` : ''}`,
                lastFailure?.cause,
              ),
        );
      };
      // Most calls use the connection's own timeout: those share one timer (per clock, across
      // connections); the others get their own.
      if (timeoutMs === requestTimeoutMs) cancelTimeout = timeouts.add(onTimeout);
      else {
        const timer = clock.setTimer(onTimeout, timeoutMs);
        cancelTimeout = () => timer.cancel();
      }
      if (signal) {
        onAbort = () => stopWaiting(cancelled());
        signal.addEventListener('abort', onAbort, { once: true });
      }
      if (state === 'ready' && socket) send(socket, pending);
      else {
        queue.push(pending);
        if (state === 'idle') open();
      }
    });
  }

  let closing: Promise<void> | undefined;

  return {
    get session() {
      return session;
    },
    call,
    close() {
      if (closing) return closing;
      state = 'closed';
      backoffTimer?.cancel();
      const ws = socket;
      teardown('client closed');
      const error = closedError();
      for (const pending of queue.splice(0)) settle(pending, error);
      closing = new Promise<void>((resolve) => {
        if (!ws || ws.readyState > OPEN) {
          resolve();
          return;
        }
        // Wait briefly for the closing handshake so the server sees a clean close, but never
        // let a dead peer hold close() up.
        const timer = clock.setTimer(() => {
          ws.terminate?.();
          resolve();
        }, 1_000);
        ws.addEventListener('close', () => {
          timer.cancel();
          resolve();
        });
        closeQuietly(ws, 1000, 'client closed');
      });
      return closing;
    },
  };
}

function frame(id: number, method: string, params: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method, params });
}

function closeQuietly(ws: WebSocketLike, code: number, reason: string): void {
  try {
    if (code !== 1000 && ws.terminate) ws.terminate();
    else ws.close(code, reason);
  } catch {}
}

function isRpcError(value: unknown): value is RpcErrorObject {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { code?: unknown }).code === 'number' &&
    typeof (value as { message?: unknown }).message === 'string'
  );
}

/**
 * Why a connection attempt failed, in words a user can act on, from what `ws` (or a WHATWG
 * WebSocket) reported: refused, host not found, the HTTP status of a refused upgrade (a wrong
 * path is 404), a TLS failure. The original text follows in parentheses.
 */
export function describeFailure(error: unknown): string {
  const text = messageOf(error);
  const code = (error as { code?: unknown } | undefined)?.code;
  const upgrade = /Unexpected server response: (\d+)/.exec(text);
  let what: string | undefined;
  if (upgrade) what = `HTTP ${upgrade[1]} on the WebSocket upgrade`;
  else if (code === 'ECONNREFUSED') what = 'connection refused';
  else if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') what = 'host not found';
  else if (code === 'ETIMEDOUT') what = 'connect timed out';
  else if (code === 'ECONNRESET') what = 'connection reset';
  else if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') what = 'host unreachable';
  else if (
    (typeof code === 'string' && /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_VERIFY|EPROTO/.test(code)) ||
    /certificate|\bssl\b|\btls\b/i.test(text)
  )
    what = 'TLS error';
  return what ? `${what} (${text})` : text;
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return error === undefined ? 'unknown error' : String(error);
}

function unavailable(message: string, cause?: unknown, indeterminate = false): DlmError {
  return new DlmError('UNAVAILABLE', message, {
    ...(cause === undefined ? {} : { cause }),
    ...(indeterminate ? { indeterminate: true } : {}),
  });
}

function cancelled(): DlmError {
  return new DlmError('CANCELLED', 'the caller stopped waiting');
}

function closedError(): DlmError {
  return new DlmError('CANCELLED', 'the client is closed');
}
