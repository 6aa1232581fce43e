import { randomUUID } from 'node:crypto';
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
  toRpcError,
} from '@dlm/protocol';
import type { Logger } from './logger.js';
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
  const { service, logger } = context;
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

  async function serve(request: RpcRequest): Promise<void> {
    const controller = new AbortController();
    waits.add(controller);
    inflight += 1;
    try {
      const result = await handlers[request.method](request.params, controller.signal);
      send({ jsonrpc: '2.0', id: request.id, result });
    } catch (error) {
      if (!isDlmError(error)) {
        logger.error('request failed with an internal error', {
          method: request.method,
          error: String(error),
        });
      }
      send({ jsonrpc: '2.0', id: request.id, error: toRpcError(error) });
    } finally {
      inflight -= 1;
      waits.delete(controller);
    }
  }

  return {
    id,

    handleFrame(data) {
      if (data === null) {
        send({
          jsonrpc: '2.0',
          id: null,
          error: toRpcError(
            new DlmError('INVALID_REQUEST', 'binary frames are not supported: send JSON text'),
          ),
        });
        return;
      }
      const parsed = parseRequest(data);
      if ('error' in parsed) {
        send({ jsonrpc: '2.0', id: parsed.id, error: toRpcError(parsed.error) });
        return;
      }
      if (!helloDone && parsed.method !== 'session.hello') {
        send({
          jsonrpc: '2.0',
          id: parsed.id,
          error: toRpcError(new DlmError('HELLO_REQUIRED', 'send session.hello first')),
        });
        return;
      }
      if (inflight >= context.limits.maxInflight) {
        send({
          jsonrpc: '2.0',
          id: parsed.id,
          error: toRpcError(
            new DlmError(
              'LIMIT_EXCEEDED',
              `at most ${context.limits.maxInflight} requests may be in flight`,
            ),
          ),
        });
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
