import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  createLeaseKey,
  DlmError,
  formatToken,
  isDlmError,
  type LockService,
  type LostEvent,
  notHolderError,
  parseToken,
  validateLeaseKey,
  validateName,
  validateTtl,
} from '@dlm/core';
import {
  type NotificationName,
  type NotificationParams,
  PROTOCOL,
  type RpcRequestId,
  toRpcError,
} from '@dlm/protocol';
import type { Authenticator } from './auth.js';
import { CLOSE } from './close-codes.js';
import type { ServerLimits } from './limits.js';
import type { FeedEvent, LockFeed } from './lock-feed.js';
import type { Logger } from './logger.js';
import type { ServerMetrics } from './metrics.js';
import { type Action, ANONYMOUS, allows, allowsPrefix, type Principal } from './permissions.js';
import { validatePrefix } from './prefix.js';
import { parseRequest, type RpcRequest } from './rpc.js';
import { createTokenBucket } from './token-bucket.js';

export type SessionLimits = Pick<
  ServerLimits,
  | 'maxInflight'
  | 'maxLocksPerSession'
  | 'maxWatchesPerSession'
  | 'messagesPerSecond'
  | 'messageBurst'
> & { maxPayloadBytes: number };

/**
 * Which session holds each lease granted (or adopted by extend) through this server, keyed by
 * `leaseId(name, token)`: the holder's function that drops it from its count, and the lease's
 * key. A release through any session that presents the key calls it, so the holder's slot is
 * freed at once; a NOT_HOLDER answer drops it only when the key presented was the lease's (the
 * lease is gone), never for someone else's wrong guess.
 */
export type LeaseRegistry = Map<string, { drop: () => void; leaseKey: string }>;

export function leaseId(name: string, token: bigint): string {
  return `${token}\u0000${name}`;
}

export interface SessionContext {
  service: LockService;
  limits: SessionLimits;
  serverVersion: string;
  logger: Logger;
  /** The server's live view of held locks, for `lock.watchPrefix`. */
  feed: LockFeed;
  metrics: ServerMetrics;
  /** Shared by all sessions of a server. */
  leases: LeaseRegistry;
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

/** One WebSocket connection speaking protocol v1. */
export interface Session {
  readonly id: string;
  handleFrame(data: string | null): void;
  /** The connection closed: pending waits end (and can no longer be granted), watches stop. */
  close(): void;
}

type Handler = (
  params: Record<string, unknown>,
  signal: AbortSignal | undefined,
) => Promise<unknown>;

export function createSession(context: SessionContext): Session {
  const { service, logger, feed, metrics } = context;
  const id = randomUUID();
  const { limits } = context;
  let helloDone = false;
  let principal: Principal = ANONYMOUS;
  let open = true;
  let inflight = 0;
  let watchSeq = 0;
  const waits = new Set<AbortController>();
  const watches = new Map<string, () => void>();
  // The leases this session holds (acquired, or adopted by extending them), by name, and its
  // acquires in flight: together at most maxLocksPerSession.
  const held = new Map<string, bigint>();
  // The key and owner of each lease in `held`: what lets this session release, extend and
  // re-acquire it without sending the key (v1 clients), and nobody else without it.
  const proofs = new Map<string, { owner: string; leaseKey: string }>();
  let acquiring = 0;
  const rateLimited = limits.messagesPerSecond > 0;
  const bucket = createTokenBucket(limits.messagesPerSecond, limits.messageBurst, context.now);
  // Frames refused for the rate draw on a second bucket of the same size that refills at a
  // tenth of the rate: a client that backs off when told LIMIT_EXCEEDED never empties it, one
  // that keeps sending regardless does, and is disconnected.
  const overflow = createTokenBucket(
    limits.messagesPerSecond / 10,
    limits.messageBurst,
    context.now,
  );

  function send(message: Record<string, unknown>): void {
    if (!open) return;
    context.send(JSON.stringify(message));
  }

  function notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    send({ jsonrpc: '2.0', method, params });
  }

  const onLost = (event: LostEvent) => {
    forget(event.name, event.token);
    notify('lock.lost', {
      name: event.name,
      token: formatToken(event.token),
      reason: event.reason,
    });
  };

  function optionalOwner(params: Record<string, unknown>): string {
    return params.owner === undefined ? id : (params.owner as string);
  }

  const droppers = new Map<string, () => void>();

  /** Counts a lease as this session's, and no longer as any other session's. */
  function hold(name: string, token: bigint, owner: string, leaseKey: string): void {
    const previous = held.get(name);
    if (previous !== undefined && previous !== token) forget(name, previous);
    held.set(name, token);
    proofs.set(name, { owner, leaseKey });
    const key = leaseId(name, token);
    let drop = droppers.get(key);
    if (!drop) {
      drop = () => forget(name, token);
      droppers.set(key, drop);
    }
    const other = context.leases.get(key);
    if (other?.drop !== drop) {
      other?.drop();
      context.leases.set(key, { drop, leaseKey });
    }
  }

  function forget(name: string, token: bigint): void {
    if (held.get(name) === token) {
      held.delete(name);
      proofs.delete(name);
    }
    const key = leaseId(name, token);
    const drop = droppers.get(key);
    if (!drop) return;
    droppers.delete(key);
    if (context.leases.get(key)?.drop === drop) context.leases.delete(key);
  }

  /**
   * The backend answered about the lease (`name`, `token`) to a caller that presented
   * `leaseKey`: released, or NOT_HOLDER. Either way, if that was the lease's own key, the lease
   * is over and whichever session held it drops it; a wrong key tells nothing about the lease.
   */
  function ended(name: string, token: bigint, leaseKey: string): void {
    const entry = context.leases.get(leaseId(name, token));
    if (entry?.leaseKey === leaseKey) entry.drop();
  }

  /**
   * The key a release or extend presents: the one sent, else this session's own for that lease
   * (it was granted here). Null: no proof, NOT_HOLDER, as for a wrong key. The service is never
   * called without a key: it would take the server's own tracking of the lease as the proof.
   */
  function proofFor(name: string, token: bigint, params: Record<string, unknown>): string | null {
    if (params.leaseKey !== undefined) return validateLeaseKey(params.leaseKey);
    return held.get(name) === token ? proofs.get(name)!.leaseKey : null;
  }

  /** The name a lock method is about, checked, and that the principal may `actions` on it. */
  function permittedName(params: Record<string, unknown>, ...actions: Action[]): string {
    const name = validateName(params.name, service.limits);
    if (!actions.some((action) => allows(principal, action, name))) {
      throw new DlmError(
        'FORBIDDEN',
        `token ${JSON.stringify(principal.name)} may not ${actions.join(' or ')} ${JSON.stringify(name)}`,
      );
    }
    return name;
  }

  /** Makes room for one more acquire, or says why there is none. */
  function reserveLock(name: string): void {
    if (!held.has(name) && held.size + acquiring >= limits.maxLocksPerSession) {
      throw new DlmError(
        'LIMIT_EXCEEDED',
        `a session may hold at most ${limits.maxLocksPerSession} locks (acquires in flight included)`,
      );
    }
  }

  function reserveWatch(): void {
    if (watches.size >= limits.maxWatchesPerSession) {
      throw new DlmError(
        'LIMIT_EXCEEDED',
        `a session may have at most ${limits.maxWatchesPerSession} watches`,
      );
    }
  }

  const handlers: Record<RpcRequest['method'], Handler> = {
    'session.hello': async (params) => {
      if (helloDone)
        throw new DlmError('INVALID_REQUEST', 'session.hello was already sent on this connection');
      const { authenticator } = context;
      let who = context.principal;
      if (params.auth !== undefined) {
        if (typeof params.auth !== 'string') {
          throw new DlmError('INVALID_PARAMS', 'auth must be a string', { field: 'auth' });
        }
        // A server without tokens ignores credentials.
        if (authenticator.required) {
          who = authenticator.verify(params.auth);
          if (!who) throw new DlmError('UNAUTHENTICATED', 'the token in auth is not valid');
        }
      }
      if (authenticator.required && !who) {
        throw new DlmError(
          'UNAUTHENTICATED',
          'this server requires a token: send it as session.hello auth or as Authorization: Bearer',
        );
      }
      principal = who ?? ANONYMOUS;
      helloDone = true;
      context.onHello?.(principal);
      const bounds = service.limits;
      return {
        sessionId: id,
        protocol: PROTOCOL,
        server: { name: 'dlm', version: context.serverVersion },
        backend: service.backend.kind,
        limits: {
          maxPayloadBytes: limits.maxPayloadBytes,
          maxNameBytes: bounds.maxNameBytes,
          minTtlMs: bounds.minTtlMs,
          maxTtlMs: bounds.maxTtlMs,
          maxWaitMs: bounds.maxWaitMs,
          maxInflight: limits.maxInflight,
        },
      };
    },

    'session.ping': async () => ({}),

    'lock.acquire': async (params, signal) => {
      const name = permittedName(params, 'lock');
      const owner = optionalOwner(params);
      // Without a key: this session's own lease for that owner (an idempotent re-acquire on
      // the same connection), else a fresh one. Never the service's default, which would hand
      // any session naming the owner the lease some other session holds.
      const own = proofs.get(name);
      const leaseKey =
        params.leaseKey !== undefined
          ? validateLeaseKey(params.leaseKey)
          : own?.owner === owner
            ? own.leaseKey
            : createLeaseKey();
      reserveLock(name);
      acquiring += 1;
      let lease: Awaited<ReturnType<LockService['acquire']>>;
      try {
        lease = await service.acquire({
          name,
          ttlMs: params.ttlMs as number,
          waitMs: params.waitMs as number,
          owner,
          leaseKey,
          ...(signal ? { signal } : {}),
          onLost,
        });
      } finally {
        acquiring -= 1;
      }
      // A grant that arrives after the connection closed belongs to nobody here.
      if (open) hold(lease.name, lease.token, lease.owner, lease.leaseKey);
      // The only place a key is ever sent: to the caller of this acquire.
      return {
        name: lease.name,
        owner: lease.owner,
        token: formatToken(lease.token),
        ttlMs: lease.ttlMs,
        leaseKey: lease.leaseKey,
      };
    },

    'lock.release': async (params) => {
      const name = permittedName(params, 'lock');
      const token = parseToken(params.token);
      const leaseKey = proofFor(name, token, params);
      if (leaseKey === null) throw notHolderError(name, token);
      try {
        await service.release({ name, token, leaseKey });
      } catch (error) {
        if (isDlmError(error, 'NOT_HOLDER')) ended(name, token, leaseKey);
        throw error;
      }
      ended(name, token, leaseKey);
      return { released: true };
    },

    'lock.extend': async (params) => {
      const name = permittedName(params, 'lock');
      const token = parseToken(params.token);
      const leaseKey = proofFor(name, token, params);
      // Bad input is told as such before NOT_HOLDER, as the service would.
      validateTtl(params.ttlMs, service.limits);
      if (leaseKey === null) throw notHolderError(name, token);
      let lease: Awaited<ReturnType<LockService['extend']>>;
      try {
        lease = await service.extend({
          name,
          token,
          ttlMs: params.ttlMs as number,
          leaseKey,
          onLost,
        });
      } catch (error) {
        if (isDlmError(error, 'NOT_HOLDER')) ended(name, token, leaseKey);
        throw error;
      }
      // Extending with the key adopts the lease: its lock.lost now comes here, and it counts as
      // held here (a holder that reconnected to this server).
      if (open) hold(lease.name, lease.token, lease.owner, lease.leaseKey);
      return { name: lease.name, token: formatToken(lease.token), ttlMs: lease.ttlMs };
    },

    'lock.get': async (params) => {
      const name = permittedName(params, 'lock', 'watch');
      const state = await service.get(name);
      if (!state) return { name, held: false };
      return {
        name,
        held: true,
        owner: state.owner,
        token: formatToken(state.token),
        ttlRemainingMs: Math.max(0, Math.ceil(state.ttlRemainingMs)),
      };
    },

    'lock.watch': async (params) => {
      const name = permittedName(params, 'watch');
      reserveWatch();
      watchSeq += 1;
      const watchId = `w${watchSeq}`;
      // Subscribe before reading the state, so no change between the two is missed.
      const stop = service.watch(name, (change) => {
        // lock.watch reports grants, releases and expiries; a longer lease is none of them.
        if (change.type === 'extended') return;
        if (!change.held) {
          notify('lock.changed', { watchId, name, held: false });
          return;
        }
        notify('lock.changed', {
          watchId,
          name,
          held: true,
          ...(change.owner === undefined ? {} : { owner: change.owner }),
          ...(change.token === undefined ? {} : { token: formatToken(change.token) }),
        });
      });
      watches.set(watchId, stop);
      try {
        const state = await service.get(name);
        return state
          ? { watchId, held: true, token: formatToken(state.token) }
          : { watchId, held: false };
      } catch (error) {
        watches.delete(watchId);
        stop();
        throw error;
      }
    },

    'lock.watchPrefix': async (params) => {
      const prefix = validatePrefix(params.prefix, service.limits);
      if (!allowsPrefix(principal, 'watch', prefix)) {
        throw new DlmError(
          'FORBIDDEN',
          `token ${JSON.stringify(principal.name)} may not watch the prefix ${JSON.stringify(prefix)}`,
        );
      }
      reserveWatch();
      // Locks granted through other servers on a shared backend join the feed first.
      await feed.seed(prefix);
      watchSeq += 1;
      const watchId = `w${watchSeq}`;
      // Subscribing and taking the snapshot happen in the same turn: no change falls between.
      const stop = feed.subscribe(prefix, (event: FeedEvent) => {
        notify('lock.changed', {
          watchId,
          name: event.name,
          held: event.held,
          ...(event.owner === undefined ? {} : { owner: event.owner }),
          ...(event.token === undefined ? {} : { token: formatToken(event.token) }),
          event: event.type,
          ...(event.ttlRemainingMs === undefined ? {} : { ttlRemainingMs: event.ttlRemainingMs }),
          waiters: event.waiters,
        });
      });
      watches.set(watchId, stop);
      return {
        watchId,
        locks: feed.snapshot(prefix).map((lock) => ({
          name: lock.name,
          owner: lock.owner,
          token: formatToken(lock.token),
          ttlRemainingMs: lock.ttlRemainingMs,
          waiters: lock.waiters,
        })),
      };
    },

    'lock.unwatch': async (params) => {
      const { watchId } = params;
      const stop = typeof watchId === 'string' ? watches.get(watchId) : undefined;
      if (!stop) {
        throw new DlmError('INVALID_PARAMS', 'watchId does not name a watch of this session', {
          field: 'watchId',
        });
      }
      watches.delete(watchId as string);
      stop();
      return {};
    },
  };

  /** Counts and times one answered request. */
  function record(request: RpcRequest, code: string, startedAt: number): void {
    metrics.request(request.method, code);
    const { method } = request;
    if (method === 'lock.acquire') {
      const seconds = (performance.now() - startedAt) / 1000;
      const waitMs = request.params.waitMs;
      if (typeof waitMs === 'number' && waitMs > 0) {
        metrics.wait(
          code === 'OK'
            ? 'granted'
            : code === 'LOCK_HELD'
              ? 'timeout'
              : code === 'CANCELLED'
                ? 'cancelled'
                : 'error',
          seconds,
        );
      } else {
        metrics.latency(method, seconds);
      }
    } else if (method === 'lock.release' || method === 'lock.extend') {
      metrics.latency(method, (performance.now() - startedAt) / 1000);
    }
  }

  async function serve(request: RpcRequest): Promise<void> {
    const startedAt = performance.now();
    // Only an acquire that waits can be cancelled (by the connection closing): only it gets a
    // controller, the other requests finish on their own within the backend's bound.
    const waitMs = request.method === 'lock.acquire' ? request.params.waitMs : undefined;
    const controller = typeof waitMs === 'number' && waitMs > 0 ? new AbortController() : undefined;
    if (controller) waits.add(controller);
    inflight += 1;
    try {
      const result = await handlers[request.method](request.params, controller?.signal);
      send({ jsonrpc: '2.0', id: request.id, result });
      record(request, 'OK', startedAt);
    } catch (error) {
      if (!isDlmError(error)) {
        logger.error('request failed with an internal error', {
          session: id,
          method: request.method,
          error: String(error),
        });
      }
      const rpcError = toRpcError(error);
      send({ jsonrpc: '2.0', id: request.id, error: rpcError });
      record(request, rpcError.data.code, startedAt);
      if (rpcError.data.code === 'UNAUTHENTICATED') {
        metrics.connectionEnded('unauthenticated');
        logger.warn('authentication failed', {
          session: id,
          remoteAddress: context.remoteAddress,
        });
        context.end(CLOSE.UNAUTHENTICATED, 'unauthenticated');
      }
    } finally {
      inflight -= 1;
      if (controller) waits.delete(controller);
    }
  }

  /** Answers a frame that is not served (protocol error, hello missing, too many in flight). */
  function reject(requestId: RpcRequestId | null, method: string, error: DlmError): void {
    send({ jsonrpc: '2.0', id: requestId, error: toRpcError(error) });
    metrics.request(method, error.code);
  }

  return {
    id,

    handleFrame(data) {
      if (!open) return;
      if (rateLimited && !bucket.take()) {
        if (!overflow.take()) {
          logger.warn('connection closed: message rate', {
            session: id,
            remoteAddress: context.remoteAddress,
          });
          metrics.connectionEnded('message_rate');
          context.end(CLOSE.LIMIT_EXCEEDED, 'message rate exceeded');
          close();
          return;
        }
        const parsed = data === null ? null : parseRequest(data);
        reject(
          parsed === null ? null : parsed.id,
          parsed === null || 'error' in parsed ? 'invalid' : parsed.method,
          new DlmError(
            'LIMIT_EXCEEDED',
            `at most ${limits.messagesPerSecond} messages per second (bursts of ${limits.messageBurst})`,
          ),
        );
        return;
      }
      if (data === null) {
        reject(
          null,
          'invalid',
          new DlmError('INVALID_REQUEST', 'binary frames are not supported: send JSON text'),
        );
        return;
      }
      const parsed = parseRequest(data);
      if ('error' in parsed) {
        // A method the server does not know is counted as `invalid`: label values stay a
        // closed set whatever clients send.
        reject(parsed.id, 'invalid', parsed.error);
        return;
      }
      if (!helloDone && parsed.method !== 'session.hello') {
        reject(
          parsed.id,
          parsed.method,
          new DlmError('HELLO_REQUIRED', 'send session.hello first'),
        );
        return;
      }
      if (inflight >= limits.maxInflight) {
        reject(
          parsed.id,
          parsed.method,
          new DlmError('LIMIT_EXCEEDED', `at most ${limits.maxInflight} requests may be in flight`),
        );
        return;
      }
      void serve(parsed);
    },

    close,
  };

  function close(): void {
    if (!open) return;
    open = false;
    for (const controller of waits) controller.abort();
    waits.clear();
    for (const stop of watches.values()) stop();
    watches.clear();
    for (const [name, token] of [...held]) forget(name, token);
  }
}
