import type { LockService } from '@dlm/core';
import type { NotificationName, NotificationParams, RpcRequestId } from '@dlm/protocol';
import type { Authenticator } from './auth.js';
import type { ServerLimits } from './limits.js';
import type { LockFeed } from './lock-feed.js';
import type { Logger } from './logger.js';
import type { ServerMetrics } from './metrics.js';
import type { Principal } from './permissions.js';
import type { RpcRequest } from './rpc.js';
import type { LeaseHolders, SessionLeases } from './session-leases.js';

export type SessionLimits = Pick<
  ServerLimits,
  | 'maxInflight'
  | 'maxLocksPerSession'
  | 'maxWatchesPerSession'
  | 'messagesPerSecond'
  | 'messageBurst'
> & { maxPayloadBytes: number };

export interface SessionContext {
  service: LockService;
  limits: SessionLimits;
  serverVersion: string;
  logger: Logger;
  /** The server's live view of held locks, for `lock.watchPrefix`. */
  feed: LockFeed;
  metrics: ServerMetrics;
  /** Which session holds each lease granted here; shared by all sessions of a server. */
  holders: LeaseHolders;
  /** Checks the token a `session.hello` carries. */
  authenticator: Authenticator;
  /** Whom the upgrade's `Authorization` header authenticated, if it had one. */
  principal: Principal | null;
  /** For the log lines about this connection. */
  remoteAddress: string | undefined;
  /** Monotonic milliseconds, for the message-rate bucket. */
  now: () => number;
  /** Sends one text frame; false once the connection is gone. */
  send: (text: string) => boolean;
  /** Closes the connection with `code` after the frames already sent. */
  end: (code: number, reason: string) => void;
  /** `session.hello` succeeded. */
  onHello?: (principal: Principal) => void;
}

/** The leases a scope holds: a session's `SessionLeases`; none for a request of the HTTP door. */
export type HeldLeases = Pick<
  SessionLeases,
  'get' | 'keyFor' | 'holdsWith' | 'hold' | 'count' | 'upperBound'
>;

/**
 * What the lock methods need of their caller: a WebSocket session, or one request of an HTTP
 * door (no session: an id of its own as the default owner, no leases kept, nobody to notify).
 */
export interface LockScope {
  readonly id: string;
  readonly context: Pick<SessionContext, 'service' | 'serverVersion' | 'limits'>;
  readonly principal: Principal;
  /** False once the caller is gone: a late grant belongs to nobody here. */
  readonly open: boolean;
  readonly leases: HeldLeases;
  /** Acquires in flight: they count against `maxLocksPerSession` with the leases held. */
  acquiring: number;
  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void;
}

/** What the request handlers of one session share: its identity, state and way out. */
export interface SessionScope {
  readonly id: string;
  readonly context: SessionContext;
  /** Whom `session.hello` authenticated (ANONYMOUS before, and on a server without tokens). */
  principal: Principal;
  helloDone: boolean;
  /** False once the connection closed: a late grant belongs to nobody here. */
  readonly open: boolean;
  /** The leases this session holds. */
  readonly leases: SessionLeases;
  /** Acquires in flight: they count against `maxLocksPerSession` with the leases held. */
  acquiring: number;
  /** This session's watches, by id: each one's function stops it. */
  readonly watches: Map<string, () => void>;
  notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void;
  /**
   * `session.hello` agreed on multi-message frames: from now on the session accepts array
   * frames, and what it sends in one turn leaves in one frame.
   */
  startMultiFrames(): void;
}

export type Handler = (
  params: Record<string, unknown>,
  signal: AbortSignal | undefined,
  /** The request's JSON-RPC id (for notifications about it: `lock.queued`). */
  id?: RpcRequestId,
) => Promise<unknown>;

export type Handlers<M extends RpcRequest['method']> = Record<M, Handler>;
