import type { ConformanceTransport } from '@dlm/conformance';
import {
  DEFAULT_LIMITS,
  DlmError,
  type Lease,
  type LockBackend,
  type LockMode,
  type LockService,
  type LockState,
  type WaitersScope,
} from '@dlm/core';
import { fromRpcError, type RpcErrorObject } from '@dlm/protocol';
import { startServer } from '../src/index.js';

/** A grant as the wire carries it. */
interface WireGrant {
  name: string;
  owner: string;
  token: string;
  ttlMs: number;
  leaseKey: string;
  mode: LockMode;
  limit?: number;
}

function leaseOf(grant: WireGrant): Lease {
  return {
    name: grant.name,
    owner: grant.owner,
    token: BigInt(grant.token),
    ttlMs: grant.ttlMs,
    mode: grant.mode,
    leaseKey: grant.leaseKey,
    ...(grant.limit === undefined ? {} : { limit: grant.limit }),
  };
}

const unsupported = (what: string) => () => {
  throw new Error(`${what} does not go through POST /v1/rpc (no session): WebSocket only`);
};

/**
 * Core's `LockService` interface, served by a dlm server over `backend` and called through its
 * HTTP door, `POST /v1/rpc`, one request per call, as any HTTP client would: the caller keeps the
 * lease keys of its grants (there is no session to keep them) and presents them on release and
 * extend. `waiters` reads the server's own count (through its observer); an aborted wait closes
 * its request, which is what cancels it on the server. Watches, revocation and `lock.lost` are
 * the WebSocket's.
 */
export async function httpRpcService(backend: LockBackend): Promise<LockService> {
  const waiting = new Map<string, number>();
  const server = await startServer({
    port: 0,
    backend,
    service: { observer: { waiting: (name, count) => void waiting.set(name, count) } },
  });
  const keys = new Map<string, string>();
  const keyId = (name: string, token: bigint) => `${token}\u0000${name}`;
  // What a client does for a re-acquire by an owner it holds a lease for: send that lease's key
  // (the server keeps none for a request that has no session).
  const ownerKeys = new Map<string, string>();
  const ownerId = (name: string, owner: unknown) => `${String(owner)}\u0000${name}`;
  const keyOfOwner = (names: readonly string[], owner: unknown, given: string | undefined) => {
    if (given !== undefined || owner === undefined) return given;
    const found = new Set(names.map((name) => ownerKeys.get(ownerId(name, owner))));
    const [key] = found;
    return found.size === 1 ? key : undefined;
  };
  let seq = 0;

  async function call<T>(method: string, params: object, signal?: AbortSignal): Promise<T> {
    seq += 1;
    let response: Response;
    try {
      response = await fetch(`${server.httpUrl}/v1/rpc`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: seq, method, params }),
        ...(signal ? { signal } : {}),
      });
    } catch (error) {
      if (signal?.aborted)
        throw new DlmError('CANCELLED', 'the wait was aborted', { cause: error });
      throw new DlmError('UNAVAILABLE', `POST /v1/rpc failed: ${String(error)}`, { cause: error });
    }
    const reply = (await response.json()) as { result?: T; error?: RpcErrorObject };
    if (reply.error) throw fromRpcError(reply.error);
    return reply.result as T;
  }

  const remember = (lease: Lease) => {
    keys.set(keyId(lease.name, lease.token), lease.leaseKey);
    ownerKeys.set(ownerId(lease.name, lease.owner), lease.leaseKey);
    return lease;
  };
  const keyFor = (name: string, token: bigint, given?: string) =>
    given ?? keys.get(keyId(name, token));
  const token = (value: bigint) => (typeof value === 'bigint' ? value.toString() : value);

  return {
    backend,
    limits: {
      ...DEFAULT_LIMITS,
      minTtlMs: Math.max(DEFAULT_LIMITS.minTtlMs, backend.capabilities.minTtlMs),
      maxLockDelayMs: backend.capabilities.lockDelay ? DEFAULT_LIMITS.maxLockDelayMs : 0,
      maxHoldMs: backend.capabilities.maxHold ? DEFAULT_LIMITS.maxHoldMs : 0,
    },
    async acquire({ signal, onLost: _onLost, aroundBackendCall: _around, ...params }) {
      const leaseKey = keyOfOwner([params.name], params.owner, params.leaseKey);
      return remember(
        leaseOf(await call<WireGrant>('lock.acquire', { ...params, leaseKey }, signal)),
      );
    },
    async acquireAll({ signal, onLost: _onLost, aroundBackendCall: _around, ...params }) {
      const names = Array.isArray(params.locks) ? params.locks.map((lock) => lock?.name) : [];
      const leaseKey = keyOfOwner(names, params.owner, params.leaseKey);
      const { grants } = await call<{ grants: WireGrant[] }>(
        'lock.acquireAll',
        { ...params, leaseKey },
        signal,
      );
      return grants.map((grant) => remember(leaseOf(grant)));
    },
    requestRelease: ({ name, reason }) =>
      call<{ name: string; notified: number }>('lock.requestRelease', {
        name,
        ...(reason === undefined ? {} : { reason }),
      }),
    async release({ name, token: held, leaseKey }) {
      const key = keyFor(name, held, leaseKey);
      await call('lock.release', { name, token: token(held), ...(key ? { leaseKey: key } : {}) });
      keys.delete(keyId(name, held));
    },
    async extend({ name, token: held, ttlMs, leaseKey }) {
      const key = keyFor(name, held, leaseKey);
      const extended = await call<{ name: string; token: string; ttlMs: number }>('lock.extend', {
        name,
        token: token(held),
        ttlMs,
        ...(key ? { leaseKey: key } : {}),
      });
      return {
        name: extended.name,
        token: BigInt(extended.token),
        ttlMs: extended.ttlMs,
        owner: '',
        mode: 'exclusive',
        leaseKey: key ?? '',
      };
    },
    async get(name) {
      const state = await call<Record<string, any>>('lock.get', { name });
      if (!state.held) return null;
      return {
        name,
        owner: state.owner,
        token: BigInt(state.token),
        ttlRemainingMs: state.ttlRemainingMs,
        mode: state.mode,
        ...(state.limit === undefined ? {} : { limit: state.limit }),
        holders: (state.holders as Array<Record<string, any>>).map((holder) => ({
          owner: holder.owner,
          token: BigInt(holder.token),
          ttlRemainingMs: holder.ttlRemainingMs,
        })),
      } as LockState;
    },
    async check(name, held) {
      const answer = await call<{ current: boolean }>('lock.check', { name, token: token(held) });
      return answer.current;
    },
    async lockDelayOf(name) {
      const state = await call<{ held: boolean; lockDelayRemainingMs?: number }>('lock.get', {
        name,
      });
      return state.held ? 0 : (state.lockDelayRemainingMs ?? 0);
    },
    holds: (name, held) => keys.has(keyId(name, held)),
    waiters: (name) => waiting.get(name) ?? 0,
    async countWaiters(name) {
      const { waiters, waitersScope } = await call<{
        waiters: number;
        waitersScope: WaitersScope;
      }>('lock.get', { name });
      return { waiters, waitersScope };
    },
    revoke: unsupported('revoke'),
    watch: unsupported('watch'),
    checkName: unsupported('checkName'),
    close: () => server.close(),
  };
}

/** The conformance suite's transport through `POST /v1/rpc`. */
export const httpRpcTransport: ConformanceTransport = {
  name: 'POST /v1/rpc',
  open: httpRpcService,
  notifications: false,
};
