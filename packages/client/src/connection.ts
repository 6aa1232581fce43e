import {
  type Clock,
  type DeadlineQueue,
  DlmError,
  type RetryPolicy,
  settlesWithin,
  type Timer,
} from '@dlm/core';
import {
  FRAMES_MULTI,
  fromRpcError,
  MAX_PAYLOAD_BYTES,
  type MethodName,
  type NotificationName,
  type NotificationParams,
  type ParamsOf,
  packFrames,
  type ResultOf,
  SUBPROTOCOL,
} from '@dlm/protocol';
import { deadlineQueue } from './deadline-queue.js';
import { cancelled, closedError, describeFailure, messageOf, unavailable } from './failures.js';
import { PendingRequest, RequestTable } from './pending-requests.js';
import { ReconnectSchedule } from './reconnect.js';
import { activeTraceparent } from './tracing.js';
import { OPEN, type WebSocketConstructor, type WebSocketLike } from './websocket.js';
import { closeQuietly, cork, isRpcError, readMessages } from './wire.js';

export { describeFailure } from './failures.js';

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
  /** Asks for multi-message frames in `session.hello`, and uses them where the server agrees. */
  multiFrames: boolean;
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
  /** `lock.queued` about this request (its place among the waiters), while its caller waits. */
  onQueued?: ((position: number) => void) | undefined;
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

type State = 'idle' | 'connecting' | 'ready' | 'backoff' | 'closed';

/** Runs `fn` at the end of this turn of the event loop (after its I/O callbacks). */
const nextTurn: (fn: () => void) => void =
  typeof setImmediate === 'function' ? setImmediate : (fn) => setTimeout(fn, 0);

/**
 * One logical connection to the server: a WebSocket that is opened on demand, greeted with
 * `session.hello` before anything else, and replaced (with backoff) when it drops. Requests are
 * multiplexed by id; requests made while there is no session wait in a queue, bounded by their
 * timeout.
 */
export function createConnection(options: ConnectionOptions): Connection {
  const connection = new ClientConnection(options);
  return {
    get session() {
      return connection.session;
    },
    // Bound once: the client hands `call` around on its own (to every lease).
    call: connection.call.bind(connection),
    close: () => connection.close(),
  };
}

/**
 * The connection's state machine: idle → connecting (socket open, hello sent) → ready (a
 * session) → backoff after a drop → connecting again, or idle when reconnecting stops; closed
 * is final. Every socket event is checked against the current socket, so a replaced socket's
 * late events change nothing.
 */
class ClientConnection {
  session: HelloResult | undefined;
  private state: State = 'idle';
  private socket: WebSocketLike | undefined;
  private everReady = false;
  private readonly requests = new RequestTable();
  private readonly reconnect: ReconnectSchedule;
  private readonly timeouts: DeadlineQueue;
  private connectTimer: Timer | undefined;
  private pingTimer: Timer | undefined;
  /** Why the last connection attempt failed, while there is no session: said in every error. */
  private lastFailure: { reason: string; cause: unknown } | undefined;
  private closing: Promise<void> | undefined;
  /**
   * Set while the session agreed on multi-message frames: the request frames sent in this turn
   * of the event loop, for the socket they are for, sent as one frame at the turn's end.
   */
  private outbox: { ws: WebSocketLike; frames: string[] } | undefined;
  private multiFrames = false;

  constructor(private readonly options: ConnectionOptions) {
    this.reconnect = new ReconnectSchedule(options.reconnect, options.clock);
    this.timeouts = deadlineQueue(options.clock, options.requestTimeoutMs);
  }

  // ---- connecting --------------------------------------------------------------------------

  private open(): void {
    if (this.socket || this.state === 'closed') return;
    this.reconnect.cancel();
    this.state = 'connecting';
    const { options } = this;
    let ws: WebSocketLike;
    try {
      ws = new options.WebSocket(options.url, SUBPROTOCOL);
    } catch (error) {
      this.lastFailure = { reason: describeFailure(error), cause: error };
      options.onError(unavailable(`cannot open ${options.url}: ${this.lastFailure.reason}`, error));
      this.down(1006, 'could not open the WebSocket');
      return;
    }
    this.socket = ws;
    // Bounds the TCP connect, the WebSocket handshake and the hello together.
    this.connectTimer = options.clock.setTimer(
      () => this.onConnectTimeout(ws),
      options.requestTimeoutMs,
    );
    this.listen(ws);
  }

  private listen(ws: WebSocketLike): void {
    ws.addEventListener('open', () => {
      if (this.socket === ws) void this.greet(ws);
    });
    ws.addEventListener('message', (event) => {
      if (this.socket === ws) this.onMessage(event.data);
    });
    ws.addEventListener('error', (event) => {
      if (this.socket === ws) this.onSocketError(event.error ?? event.message);
    });
    ws.addEventListener('close', (event) => {
      if (this.socket === ws) this.down(event.code, event.reason);
    });
  }

  private onConnectTimeout(ws: WebSocketLike): void {
    if (this.socket !== ws) return;
    const { options } = this;
    this.lastFailure = {
      reason: `no session within ${options.requestTimeoutMs} ms (connect, upgrade and hello)`,
      cause: undefined,
    };
    options.onError(unavailable(`no session with ${options.url}: ${this.lastFailure.reason}`));
    this.drop(ws, 'connect timeout');
  }

  private onSocketError(cause: unknown): void {
    if (this.state === 'connecting') this.lastFailure = { reason: describeFailure(cause), cause };
    this.options.onError(
      unavailable(`connection to ${this.options.url} failed: ${describeFailure(cause)}`, cause),
    );
  }

  // ---- the session hello -------------------------------------------------------------------

  private async greet(ws: WebSocketLike): Promise<void> {
    let params: ParamsOf<'session.hello'>;
    try {
      params = await this.options.helloParams();
    } catch (error) {
      if (this.socket !== ws) return;
      this.fatal(
        ws,
        new DlmError('UNAUTHENTICATED', `auth failed: ${messageOf(error)}`, { cause: error }),
      );
      return;
    }
    if (this.socket !== ws) return;
    const hello = new PendingRequest(
      this.requests.nextId(),
      'session.hello',
      this.options.multiFrames ? Object.assign({}, params, { frames: FRAMES_MULTI }) : params,
      {},
      (result) => this.onHello(ws, result as HelloResult),
      (error) => this.onHelloRefused(ws, error),
    );
    this.requests.sent(hello);
    this.transmit(ws, hello);
  }

  private onHello(ws: WebSocketLike, session: HelloResult): void {
    if (this.socket !== ws) return;
    this.connectTimer?.cancel();
    this.lastFailure = undefined;
    this.session = session;
    this.multiFrames = session.frames === FRAMES_MULTI;
    this.state = 'ready';
    this.reconnect.reset();
    const reconnected = this.everReady;
    this.everReady = true;
    this.schedulePing(ws);
    for (const request of this.requests.drainQueue()) this.send(ws, request);
    this.options.onReady(session, reconnected);
  }

  private onHelloRefused(ws: WebSocketLike, error: DlmError): void {
    if (this.socket !== ws) return;
    // A refused hello (bad credentials, wrong protocol) will be refused again: stop, and let the
    // next request try afresh. A transient one goes through the backoff.
    if (error.retryable) {
      this.options.onError(error);
      this.drop(ws, 'hello failed');
    } else this.fatal(ws, error);
  }

  /** Checks an idle connection now and then; no reply in time replaces it. */
  private schedulePing(ws: WebSocketLike): void {
    const { pingIntervalMs } = this.options;
    if (pingIntervalMs <= 0) return;
    this.pingTimer = this.options.clock.setTimer(() => {
      if (this.socket !== ws) return;
      this.call('session.ping', {}).then(
        () => {
          if (this.socket === ws) this.schedulePing(ws);
        },
        () => {
          // No reply in time on a socket that still looks open: it is half-open or the server
          // is stuck. Replace it rather than let every later request time out too.
          if (this.socket === ws) this.drop(ws, 'ping timeout');
        },
      );
    }, pingIntervalMs);
  }

  // ---- going down --------------------------------------------------------------------------

  /** A failure that retrying will not fix: every waiting request gets it, no reconnect. */
  private fatal(ws: WebSocketLike, error: DlmError): void {
    const wasReady = this.state === 'ready';
    closeQuietly(ws, 1000, 'hello refused');
    this.teardown(error.message);
    if (this.state === 'closed') return;
    this.state = 'idle';
    this.reconnect.reset();
    this.requests.failQueued(error);
    // Callbacks last: a listener may call into the client, which must see the new state.
    this.options.onError(error);
    if (wasReady) this.options.onDown({ code: 1000, reason: error.message, willReconnect: false });
  }

  /** Gives up on a socket now, without waiting for a closing handshake that may never come. */
  private drop(ws: WebSocketLike, reason: string): void {
    if (this.socket !== ws) return;
    closeQuietly(ws, 4000, reason);
    this.down(1006, reason);
  }

  /** Forgets the socket and fails what was sent on it; the caller sets the next state. */
  private teardown(reason: string): void {
    this.socket = undefined;
    this.session = undefined;
    this.multiFrames = false;
    this.outbox = undefined;
    this.connectTimer?.cancel();
    this.pingTimer?.cancel();
    this.requests.failInflight(reason);
  }

  private down(code: number, reason: string): void {
    const wasReady = this.state === 'ready';
    this.teardown(reason || `close code ${code}`);
    if (this.state === 'closed') return;
    const willReconnect = this.reconnect.schedule(() => {
      if (this.state === 'backoff') this.open();
    });
    if (willReconnect) this.state = 'backoff';
    else this.stopReconnecting();
    // Callbacks last: a listener may call into the client, which must see the new state.
    if (wasReady) this.options.onDown({ code, reason, willReconnect });
  }

  /** No more attempts in this outage: what waits for a session fails, saying why. */
  private stopReconnecting(): void {
    const { options, lastFailure } = this;
    this.state = 'idle';
    const error = unavailable(
      (this.reconnect.enabled
        ? `gave up reconnecting to ${options.url} after ${this.reconnect.retries} attempts`
        : `no connection to the dlm server at ${options.url}`) +
        (lastFailure ? `: ${lastFailure.reason}` : ''),
      lastFailure?.cause,
    );
    this.reconnect.reset();
    this.requests.failQueued(error);
  }

  // ---- frames ------------------------------------------------------------------------------

  private onMessage(data: unknown): void {
    const messages = readMessages(data, this.options.onError);
    if (messages === undefined) return;
    if (!Array.isArray(messages)) this.onReply(messages);
    else for (const message of messages) this.onReply(message);
  }

  /** One message of a frame: a reply to a request, or a notification. */
  private onReply(message: Record<string, unknown>): void {
    const { id, method, params, error } = message;
    if (typeof id === 'number' || typeof id === 'string') {
      const request = this.requests.take(id as number);
      if (!request) return;
      if (isRpcError(error)) request.fail(fromRpcError(error));
      else request.succeed(message.result);
    } else if (method === 'lock.queued' && typeof params === 'object' && params !== null) {
      // About one request in flight: to its caller, not to the client's listeners.
      const { requestId, position } = params as { requestId: unknown; position: unknown };
      const request = this.requests.peek(requestId);
      if (request?.waiting && typeof position === 'number') request.options.onQueued?.(position);
    } else if (typeof method === 'string' && typeof params === 'object' && params !== null) {
      this.options.onNotification({ method, params } as ServerNotification);
    } else if (isRpcError(error)) {
      // id null: the server could not tell which request this answers.
      this.options.onError(fromRpcError(error));
    }
  }

  private transmit(ws: WebSocketLike, request: PendingRequest): void {
    if (ws.readyState !== OPEN) return; // its close event is on the way and fails the request
    if (this.multiFrames) {
      this.queue(ws, request.frame);
      return;
    }
    try {
      cork(ws);
      ws.send(request.frame);
    } catch {
      this.drop(ws, 'send failed');
    }
  }

  /** Multi-message frames: holds a request frame until the end of this turn of the event loop. */
  private queue(ws: WebSocketLike, frame: string): void {
    if (this.outbox) {
      this.outbox.frames.push(frame);
      return;
    }
    this.outbox = { ws, frames: [frame] };
    nextTurn(this.flush);
  }

  /** Sends this turn's request frames: one frame, an array when there are several. */
  private readonly flush = (): void => {
    const outbox = this.outbox;
    this.outbox = undefined;
    if (!outbox || this.socket !== outbox.ws || outbox.ws.readyState !== OPEN) return;
    const maxBytes = this.session?.limits.maxPayloadBytes ?? MAX_PAYLOAD_BYTES;
    try {
      for (const frame of packFrames(outbox.frames, maxBytes)) outbox.ws.send(frame);
    } catch {
      this.drop(outbox.ws, 'send failed');
    }
  };

  private send(ws: WebSocketLike, request: PendingRequest): void {
    this.requests.sent(request);
    request.options.onSent?.(this.options.clock.now());
    this.transmit(ws, request);
  }

  // ---- requests ----------------------------------------------------------------------------

  call<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    callOptions: CallOptions<ResultOf<M>> = {},
  ): Promise<ResultOf<M>> {
    if (this.state === 'closed') return Promise.reject(closedError());
    const { signal } = callOptions;
    if (signal?.aborted) return Promise.reject(cancelled());
    // The caller's trace, read now: a request queued for a connection is sent later.
    const traceparent = (params as { traceparent?: string }).traceparent ?? activeTraceparent();
    const sent = traceparent ? Object.assign({}, params, { traceparent }) : params;
    return new Promise<ResultOf<M>>((resolve, reject) => {
      const request = new PendingRequest(
        this.requests.nextId(),
        method,
        sent,
        callOptions as CallOptions<unknown>,
        resolve as (result: unknown) => void,
        reject,
      );
      this.bound(request, method, callOptions.timeoutMs ?? this.options.requestTimeoutMs);
      if (signal) request.listenForAbort(signal, () => this.stopWaiting(request, cancelled()));
      if (this.state === 'ready' && this.socket) this.send(this.socket, request);
      else {
        this.requests.enqueue(request);
        if (this.state === 'idle') this.open();
      }
    });
  }

  /** Ends the caller's wait after `timeoutMs`, counted from the call (queueing included). */
  private bound(request: PendingRequest, method: string, timeoutMs: number): void {
    const onTimeout = () =>
      this.stopWaiting(request, this.timeoutError(request, method, timeoutMs));
    // Most calls use the connection's own timeout: those share one timer (per clock, across
    // connections); the others get their own.
    if (timeoutMs === this.options.requestTimeoutMs) {
      request.cancelDeadline = this.timeouts.add(onTimeout);
    } else request.timer = this.options.clock.setTimer(onTimeout, timeoutMs);
  }

  private timeoutError(request: PendingRequest, method: string, timeoutMs: number): DlmError {
    if (request.sent) {
      return unavailable(
        `no reply to ${method} within ${timeoutMs} ms`,
        undefined,
        request.options.write === true,
      );
    }
    const { lastFailure } = this;
    return unavailable(
      `no session with ${this.options.url} within ${Math.round(timeoutMs)} ms${lastFailure ? `: ${lastFailure.reason}` : ''}`,
      lastFailure?.cause,
    );
  }

  private stopWaiting(request: PendingRequest, error: DlmError): void {
    this.requests.withdraw(request);
    request.fail(error);
  }

  // ---- closing -----------------------------------------------------------------------------

  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.state = 'closed';
    this.reconnect.cancel();
    const ws = this.socket;
    this.teardown('client closed');
    this.requests.failQueued(closedError());
    this.closing = this.closeSocket(ws);
    return this.closing;
  }

  /**
   * Waits briefly for the closing handshake so the server sees a clean close, but never lets a
   * dead peer hold close() up.
   */
  private async closeSocket(ws: WebSocketLike | undefined): Promise<void> {
    if (!ws || ws.readyState > OPEN) return;
    const closed = new Promise<void>((resolve) => ws.addEventListener('close', () => resolve()));
    closeQuietly(ws, 1000, 'client closed');
    if (!(await settlesWithin(this.options.clock, closed, 1_000))) ws.terminate?.();
  }
}
