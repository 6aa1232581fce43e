import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  DlmError,
  formatToken,
  isDlmError,
  type LockService,
  type LostEvent,
  parseToken,
  validateName,
} from '@dlm/core';
import {
  type NotificationName,
  type NotificationParams,
  PROTOCOL,
  type RpcRequestId,
  toRpcError,
} from '@dlm/protocol';
import type { FeedEvent, LockFeed } from './lock-feed.js';
import type { Logger } from './logger.js';
import type { ServerMetrics } from './metrics.js';
import { validatePrefix } from './prefix.js';
import { parseRequest, type RpcRequest } from './rpc.js';

export interface SessionLimits {
  maxPayloadBytes: number;
  maxInflight: number;
}

export interface SessionContext {
  service: LockService;
  limits: SessionLimits;
  serverVersion: string;
  logger: Logger;
  /** The server's live view of held locks, for `lock.watchPrefix`. */
  feed: LockFeed;
  metrics: ServerMetrics;
  /** Sends one text frame; false once the connection is gone. */
  send: (text: string) => boolean;
}

/** One WebSocket connection speaking protocol v1. */
export interface Session {
  readonly id: string;
  handleFrame(data: string | null): void;
  /** The connection closed: pending waits end (and can no longer be granted), watches stop. */
  close(): void;
}

type Handler = (params: Record<string, unknown>, signal: AbortSignal) => Promise<unknown>;

export function createSession(context: SessionContext): Session {
  const { service, logger, feed, metrics } = context;
  const id = randomUUID();
  let helloDone = false;
  let open = true;
  let inflight = 0;
  let watchSeq = 0;
  const waits = new Set<AbortController>();
  const watches = new Map<string, () => void>();

  function send(message: Record<string, unknown>): void {
    if (!open) return;
    context.send(JSON.stringify(message));
  }

  function notify<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    send({ jsonrpc: '2.0', method, params });
  }

  const onLost = (event: LostEvent) => {
    notify('lock.lost', {
      name: event.name,
      token: formatToken(event.token),
      reason: event.reason,
    });
  };

  function optionalOwner(params: Record<string, unknown>): string {
    return params.owner === undefined ? id : (params.owner as string);
  }

  const handlers: Record<RpcRequest['method'], Handler> = {
    'session.hello': async () => {
      if (helloDone)
        throw new DlmError('INVALID_REQUEST', 'session.hello was already sent on this connection');
      helloDone = true;
      const { limits } = service;
      return {
        sessionId: id,
        protocol: PROTOCOL,
        server: { name: 'dlm', version: context.serverVersion },
        backend: service.backend.kind,
        limits: {
          maxPayloadBytes: context.limits.maxPayloadBytes,
          maxNameBytes: limits.maxNameBytes,
          minTtlMs: limits.minTtlMs,
          maxTtlMs: limits.maxTtlMs,
          maxWaitMs: limits.maxWaitMs,
          maxInflight: context.limits.maxInflight,
        },
      };
    },

    'session.ping': async () => ({}),

    'lock.acquire': async (params, signal) => {
      const lease = await service.acquire({
        name: params.name as string,
        ttlMs: params.ttlMs as number,
        waitMs: params.waitMs as number,
        owner: optionalOwner(params),
        signal,
        onLost,
      });
      return {
        name: lease.name,
        owner: lease.owner,
        token: formatToken(lease.token),
        ttlMs: lease.ttlMs,
      };
    },

    'lock.release': async (params) => {
      const name = validateName(params.name, service.limits);
      await service.release({ name, token: parseToken(params.token) });
      return { released: true };
    },

    'lock.extend': async (params) => {
      const name = validateName(params.name, service.limits);
      const lease = await service.extend({
        name,
        token: parseToken(params.token),
        ttlMs: params.ttlMs as number,
        onLost,
      });
      return { name: lease.name, token: formatToken(lease.token), ttlMs: lease.ttlMs };
    },

    'lock.get': async (params) => {
      const name = validateName(params.name, service.limits);
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
      const name = validateName(params.name, service.limits);
      watchSeq += 1;
      const watchId = `w${watchSeq}`;
      // Subscribe before reading the state, so no change between the two is missed.
      const stop = service.watch(name, (change) => {
        notify('lock.changed', {
          watchId,
          name,
          held: change.held,
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
    const controller = new AbortController();
    waits.add(controller);
    inflight += 1;
    try {
      const result = await handlers[request.method](request.params, controller.signal);
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
    } finally {
      inflight -= 1;
      waits.delete(controller);
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
      if (inflight >= context.limits.maxInflight) {
        reject(
          parsed.id,
          parsed.method,
          new DlmError(
            'LIMIT_EXCEEDED',
            `at most ${context.limits.maxInflight} requests may be in flight`,
          ),
        );
        return;
      }
      void serve(parsed);
    },

    close() {
      if (!open) return;
      open = false;
      for (const controller of waits) controller.abort();
      waits.clear();
      for (const stop of watches.values()) stop();
      watches.clear();
    },
  };
}
