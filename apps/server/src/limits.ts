/**
 * What one client may take from the server. Every limit is configurable (`startServer({ limits })`,
 * a flag and an environment variable) and documented with its default in the README; each
 * guards a resource a misbehaving or hostile client could otherwise exhaust.
 */
export interface ServerLimits {
  /** Unanswered requests per connection, waits included; past it LIMIT_EXCEEDED. */
  maxInflight: number;
  /**
   * Leases a session holds (acquired, or adopted by extend) plus its acquires in flight. A lease
   * stops counting when it ends, whichever session released it.
   */
  maxLocksPerSession: number;
  /** `lock.watch` and `lock.watchPrefix` subscriptions per session. */
  maxWatchesPerSession: number;
  /** Waiters queued for one lock name on this server. */
  maxWaitersPerLock: number;
  /** WebSocket connections from one remote address; past it the upgrade gets HTTP 429. */
  maxConnectionsPerAddress: number;
  /** WebSocket connections in all; past it the upgrade gets HTTP 503. */
  maxConnections: number;
  /**
   * Frames per second per connection, sustained (token bucket refill rate); 0 turns the rate
   * limit off, the default. `maxInflight` already bounds what one connection can make the server
   * do at once, and one well-behaved client sharing its connection among many callers can send
   * far more than a few thousand frames a second: a rate limit would throttle it, not an abuser.
   * An operator who wants one sets it.
   */
  messagesPerSecond: number;
  /**
   * Frames a connection may send at once above the rate (token bucket size). Refused frames draw
   * on a second bucket of this size refilled at a tenth of the rate; when it is empty the
   * connection is closed with 4006.
   */
  messageBurst: number;
  /** Time from the upgrade to a successful `session.hello`; then close 4008. */
  helloTimeoutMs: number;
  /** WebSocket ping interval; a connection that has not answered the previous ping is dropped. */
  pingIntervalMs: number;
  /** Bytes queued for a connection that does not read; past it the connection is dropped. */
  maxBufferedBytes: number;
  /** Time for a client to send a whole HTTP request head (Node's `server.headersTimeout`). */
  headersTimeoutMs: number;
  /** Time for a client to send a whole HTTP request (Node's `server.requestTimeout`). */
  requestTimeoutMs: number;
}

export const DEFAULT_SERVER_LIMITS: Readonly<ServerLimits> = {
  maxInflight: 256,
  maxLocksPerSession: 1_000,
  maxWatchesPerSession: 1_000,
  maxWaitersPerLock: 10_000,
  maxConnectionsPerAddress: 1_000,
  maxConnections: 20_000,
  messagesPerSecond: 0,
  messageBurst: 5_000,
  helloTimeoutMs: 10_000,
  pingIntervalMs: 30_000,
  maxBufferedBytes: 16 * 1024 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
};

/** The flag and environment variable of each limit (`--max-inflight`, `DLM_MAX_INFLIGHT`). */
export const LIMIT_FLAGS: Readonly<Record<keyof ServerLimits, string>> = {
  maxInflight: 'max-inflight',
  maxLocksPerSession: 'max-locks-per-session',
  maxWatchesPerSession: 'max-watches-per-session',
  maxWaitersPerLock: 'max-waiters-per-lock',
  maxConnectionsPerAddress: 'max-connections-per-address',
  maxConnections: 'max-connections',
  messagesPerSecond: 'messages-per-second',
  messageBurst: 'message-burst',
  helloTimeoutMs: 'hello-timeout-ms',
  pingIntervalMs: 'ping-interval-ms',
  maxBufferedBytes: 'max-buffered-bytes',
  headersTimeoutMs: 'headers-timeout-ms',
  requestTimeoutMs: 'request-timeout-ms',
};

/** The limits that take 0 for "off". */
export const LIMITS_OFF_AT_ZERO: ReadonlySet<keyof ServerLimits> = new Set(['messagesPerSecond']);
