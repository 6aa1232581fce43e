import {
  type Clock,
  DEFAULT_LIMITS,
  type Limits,
  type RetryOptions,
  type RetryPolicy,
  retry,
  retryPolicy,
  systemClock,
} from '@dlm/core';
import type { MethodName, ParamsOf, ResultOf } from '@dlm/protocol';
import type { AcquireContext } from './acquire.js';
import { BackgroundCleanup, type CleanupContext } from './background-cleanup.js';
import type { ClientEvents, ClientOptions } from './client.js';
import {
  type Connection,
  type ConnectionOptions,
  createConnection,
  type ServerNotification,
} from './connection.js';
import { createEmitter, type Emitter } from './emitter.js';
import { asError } from './failures.js';
import { HeldLeases } from './held-leases.js';
import type { LeaseContext } from './lease.js';
import { loadTracing } from './tracing.js';
import { normalizeUrl } from './url.js';
import { type WatchContext, Watches } from './watches.js';
import { defaultWebSocket } from './websocket.js';

/** The version this package reports in `session.hello`. */
const CLIENT_VERSION = '0.1.0';

const DEFAULT_RECONNECT: RetryOptions = {
  attempts: Number.POSITIVE_INFINITY,
  initialDelayMs: 100,
  maxDelayMs: 5_000,
};

/**
 * What one client is made of: its connection, the leases it holds, its watches, the cleanups it
 * owes the server, its events, and the retry policy every request runs under. The public
 * methods (`createClient`) and the acquire path are written against it.
 */
export class ClientCore implements AcquireContext, CleanupContext, WatchContext {
  readonly clock: Clock;
  readonly requestTimeoutMs: number;
  /** The client's retry policy: every call layers its own options over it. */
  readonly retry: RetryPolicy;
  readonly events: Emitter<ClientEvents>;
  readonly held = new HeldLeases();
  readonly cleanup: BackgroundCleanup;
  readonly watches: Watches;
  readonly connection: Connection;
  readonly leaseContext: LeaseContext;
  readonly version = CLIENT_VERSION;
  closed = false;
  /** `limits()` of the current session, made when it began. */
  private sessionLimits: { session: object; limits: Limits } | undefined;

  constructor(options: ClientOptions) {
    this.clock = options.clock ?? systemClock;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.retry = retryPolicy(options.retry);
    this.events = createEmitter<ClientEvents>((error, event) => {
      if (event !== 'error') this.reportError(error);
    });
    this.cleanup = new BackgroundCleanup(this);
    this.watches = new Watches(this);
    this.connection = createConnection(this.connectionOptions(options));
    this.leaseContext = this.createLeaseContext();
    // Ready by the first request, so that it can send the caller's trace context.
    void loadTracing();
  }

  /**
   * The bounds requests are checked against: the server's own (from `session.hello`) once there
   * is a session; before that the protocol's defaults, which a default server uses.
   */
  limits(): Limits {
    const { session } = this.connection;
    if (!session) return DEFAULT_LIMITS;
    // Made once per session (every request checks against it).
    if (this.sessionLimits?.session !== session) {
      // hello does not report maxOwnerBytes: the protocol's default stands for it.
      this.sessionLimits = { session, limits: Object.assign({}, DEFAULT_LIMITS, session.limits) };
    }
    return this.sessionLimits.limits;
  }

  /** The client's policy under a call's `retry` option, with the call's `signal` added. */
  policyFor(retryOptions: RetryOptions | false | undefined, signal?: AbortSignal): RetryPolicy {
    const base = signal ? retryPolicy({ signal }, this.retry) : this.retry;
    return retryPolicy(retryOptions, base);
  }

  /** A request that is safe to repeat (a read, a watch, a ping), retried under `policy`. */
  request<M extends MethodName>(
    method: M,
    params: ParamsOf<M>,
    policy: RetryPolicy,
  ): Promise<ResultOf<M>> {
    const { connection, requestTimeoutMs } = this;
    return retry(
      (attempt) =>
        connection.call(method, params, {
          timeoutMs: Math.max(1, Math.min(requestTimeoutMs, attempt.remainingMs)),
          // Without a signal in the policy nothing can abort the attempt's: skip it.
          ...(policy.signals.length ? { signal: attempt.signal } : {}),
        }),
      policy,
      { clock: this.clock },
    );
  }

  reportError(error: unknown): void {
    this.events.emit('error', asError(error));
  }

  private connectionOptions(options: ClientOptions): ConnectionOptions {
    return {
      url: normalizeUrl(options.url),
      WebSocket: options.WebSocket ?? defaultWebSocket(options.tls),
      clock: this.clock,
      requestTimeoutMs: this.requestTimeoutMs,
      pingIntervalMs: options.pingIntervalMs ?? 10_000,
      multiFrames: options.frames !== 'single',
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
      onReady: (session, reconnected) => {
        this.events.emit('connected', { session, reconnected });
        this.cleanup.run();
        this.watches.reestablish();
        this.held.reconnected();
      },
      onDown: (event) => {
        this.watches.sessionDown();
        this.events.emit('disconnected', event);
      },
      onNotification: (notification) => this.onNotification(notification),
      onError: (error) => this.events.emit('error', error),
    };
  }

  private onNotification(notification: ServerNotification): void {
    if (notification.method === 'lock.lost') {
      const { name, token, reason } = notification.params;
      this.held.lose(name, token, reason);
    } else if (notification.method === 'lock.releaseRequested') {
      const { name, token, reason } = notification.params;
      this.held.askRelease(name, token, reason);
    } else if (notification.method === 'lock.changed') {
      this.watches.changed(notification.params);
    }
  }

  private createLeaseContext(): LeaseContext {
    return {
      clock: this.clock,
      retryOptions: { clock: this.clock },
      requestTimeoutMs: this.requestTimeoutMs,
      retry: this.retry,
      limits: () => this.limits(),
      call: this.connection.call,
      releaseInBackground: (name, token, leaseKey, ttlMs) =>
        this.cleanup.release(name, token, leaseKey, ttlMs),
      onEnded: (handle) => this.held.remove(handle),
      onLost: (lease, reason) => this.events.emit('lost', { lease, reason }),
      onReleaseRequested: (lease, reason) =>
        this.events.emit('releaseRequested', {
          lease,
          ...(reason === undefined ? {} : { reason }),
        }),
      onExpiring: (lease, { remainingMs }) => this.events.emit('expiring', { lease, remainingMs }),
      reportError: (error) => this.reportError(error),
    };
  }
}
