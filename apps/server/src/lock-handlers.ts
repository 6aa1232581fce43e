import { performance } from 'node:perf_hooks';
import {
  createLeaseKey,
  DlmError,
  formatToken,
  type Lease,
  type LostEvent,
  notHolderError,
  parseToken,
  validateLeaseKey,
  validateTtl,
} from '@dlm/core';
import { type Action, allows } from './permissions.js';
import { createRequestTracer, type RequestTrace } from './request-tracing.js';
import type { Handlers, SessionScope } from './session-scope.js';

type LockMethod = 'lock.acquire' | 'lock.release' | 'lock.extend' | 'lock.get';

/**
 * The name a lock method is about, and a check that the principal may `actions` on it. The
 * permission needs a valid name (a bad one is INVALID_PARAMS before any FORBIDDEN), so core's
 * `checkName` validates it here, and the service does not validate it again.
 */
export function permittedName(
  scope: SessionScope,
  params: Record<string, unknown>,
  ...actions: Action[]
): string {
  const name = scope.context.service.checkName(params.name);
  const { principal } = scope;
  if (!actions.some((action) => allows(principal, action, name))) {
    throw new DlmError(
      'FORBIDDEN',
      `token ${JSON.stringify(principal.name)} may not ${actions.join(' or ')} ${JSON.stringify(name)}`,
    );
  }
  return name;
}

/** `lock.acquire`, `lock.release`, `lock.extend` and `lock.get` for one session. */
export function lockHandlers(scope: SessionScope): Handlers<LockMethod> {
  const { service } = scope.context;
  const tracer = createRequestTracer(scope.context.serverVersion, service.backend.kind);

  const onLost = (event: LostEvent) => {
    scope.notify('lock.lost', {
      name: event.name,
      token: formatToken(event.token),
      reason: event.reason,
    });
  };

  /** Counts a lease as this session's, unless the connection closed meanwhile. */
  function hold(lease: Lease): void {
    if (scope.open) scope.leases.hold(lease);
  }

  /**
   * The key a release or extend presents: the one sent, else this session's own for that lease
   * (it was granted here). Null: no proof, NOT_HOLDER, as for a wrong key. The service is never
   * called without a key: it would take the server's own tracking of the lease as the proof.
   */
  function proofFor(name: string, token: bigint, params: Record<string, unknown>): string | null {
    if (params.leaseKey !== undefined) return validateLeaseKey(params.leaseKey);
    return scope.leases.keyFor(name, token);
  }

  /** The lease a release or extend is about, told to its span, and the proof it presents. */
  function presented(params: Record<string, unknown>, request: RequestTrace) {
    const name = permittedName(scope, params, 'lock');
    const token = parseToken(params.token);
    if (request.recording) {
      request.set({ 'dlm.lock.name': name, 'dlm.lock.token': formatToken(token) });
    }
    return { name, token, leaseKey: proofFor(name, token, params) };
  }

  /**
   * Without a key: this session's own lease for that owner (an idempotent re-acquire on the
   * same connection), else a fresh one. Never the service's default, which would hand any
   * session naming the owner the lease some other session holds.
   */
  function acquireKey(name: string, owner: string, params: Record<string, unknown>): string {
    if (params.leaseKey !== undefined) return validateLeaseKey(params.leaseKey);
    const own = scope.leases.get(name);
    return own?.owner === owner ? own.leaseKey : createLeaseKey();
  }

  /** Makes room for one more acquire, or says why there is none. */
  function reserveLock(name: string): void {
    const { maxLocksPerSession } = scope.context.limits;
    const { leases } = scope;
    // Stale entries are only swept when the count is near the bound.
    if (leases.get(name) || leases.upperBound + scope.acquiring < maxLocksPerSession) return;
    if (leases.count() + scope.acquiring < maxLocksPerSession) return;
    throw new DlmError(
      'LIMIT_EXCEEDED',
      `a session may hold at most ${maxLocksPerSession} locks (acquires in flight included)`,
    );
  }

  /** One acquire, its wait told to its span: the queue it joined, how long it took. */
  async function acquire(
    params: Record<string, unknown>,
    signal: AbortSignal | undefined,
    request: RequestTrace,
  ) {
    const name = permittedName(scope, params, 'lock');
    const owner = params.owner === undefined ? scope.id : (params.owner as string);
    const leaseKey = acquireKey(name, owner, params);
    reserveLock(name);
    // Read before the service queues this acquire: the waiters ahead of it on this server.
    if (request.recording) {
      request.set({
        'dlm.lock.name': name,
        'dlm.lock.ttl_ms': params.ttlMs as number,
        'dlm.lock.wait_ms': (params.waitMs as number | undefined) ?? 0,
        'dlm.lock.queue_position': service.waiters(name),
      });
    }
    const arrivedAt = request.recording ? performance.now() : 0;
    scope.acquiring += 1;
    let lease: Lease;
    try {
      lease = await service.acquire({
        name,
        ttlMs: params.ttlMs as number,
        waitMs: params.waitMs as number,
        owner,
        leaseKey,
        ...(signal ? { signal } : {}),
        onLost,
        aroundBackendCall: request.aroundBackendCall,
      });
    } finally {
      scope.acquiring -= 1;
      if (request.recording) request.set({ 'dlm.lock.waited_ms': performance.now() - arrivedAt });
    }
    if (request.recording) {
      request.set({ 'dlm.lock.token': formatToken(lease.token), 'dlm.lock.ttl_ms': lease.ttlMs });
    }
    hold(lease);
    // The only place a key is ever sent: to the caller of this acquire.
    return {
      name: lease.name,
      owner: lease.owner,
      token: formatToken(lease.token),
      ttlMs: lease.ttlMs,
      leaseKey: lease.leaseKey,
    };
  }

  return {
    'lock.acquire': (params, signal) =>
      tracer.trace('lock.acquire', params, 'granted', (request) =>
        acquire(params, signal, request),
      ),

    'lock.release': (params) =>
      tracer.trace('lock.release', params, 'released', async (request) => {
        const { name, token, leaseKey } = presented(params, request);
        if (leaseKey === null) throw notHolderError(name, token);
        // The lease's end reaches this session's count through core (holds) and the observer.
        await service.release({
          name,
          token,
          leaseKey,
          aroundBackendCall: request.aroundBackendCall,
        });
        return { released: true };
      }),

    'lock.extend': (params) =>
      tracer.trace('lock.extend', params, 'extended', async (request) => {
        const { name, token, leaseKey } = presented(params, request);
        // Bad input is told as such before NOT_HOLDER, as the service would.
        validateTtl(params.ttlMs, service.limits);
        if (leaseKey === null) throw notHolderError(name, token);
        const lease = await service.extend({
          name,
          token,
          ttlMs: params.ttlMs as number,
          leaseKey,
          onLost,
          aroundBackendCall: request.aroundBackendCall,
        });
        if (request.recording) request.set({ 'dlm.lock.ttl_ms': lease.ttlMs });
        // Extending with the key adopts the lease: its lock.lost now comes here, and it counts
        // as held here (a holder that reconnected to this server).
        hold(lease);
        return { name: lease.name, token: formatToken(lease.token), ttlMs: lease.ttlMs };
      }),

    'lock.get': async (params) => {
      const name = permittedName(scope, params, 'lock', 'watch');
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
  };
}
