import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { type DlmError, isDlmError, type Limits } from '@dlm/core';
import { type DoorContext, requestScope } from './door.js';
import { lockHandlers, permittedName } from './lock-handlers.js';
import type { Principal } from './permissions.js';
import { recordRequest } from './request-metrics.js';

/**
 * Dapr's lock API (v1.0-alpha1: `TryLockAlpha1`, `UnlockAlpha1`) over dlm locks, for the HTTP and
 * the gRPC door alike. A store name selects a configured name prefix, `resourceId` is the lock
 * name under it, and `lockOwner` is Dapr's holder identity: whoever presents it may unlock
 * (Dapr's own rule), so it is the lease's secret here. Every call goes through the same lock
 * handlers as the WebSocket's, and the lock is an ordinary dlm lock.
 */

/** Dapr's configuration of the doors: store name → dlm lock-name prefix. */
export interface DaprOptions {
  /** `{ lockstore: 'dapr/' }`: `resourceId` R of store `lockstore` is the dlm lock `dapr/R`. */
  stores: Readonly<Record<string, string>>;
  /** Serve Dapr's gRPC API on this port (0 picks a free one); absent: no gRPC door. */
  grpcPort?: number;
}

/** gRPC status codes Dapr answers with (the numbers of `google.rpc.Code`). */
export const GRPC = {
  INVALID_ARGUMENT: 3,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  INTERNAL: 13,
  UNAUTHENTICATED: 16,
} as const;

/** An error as Dapr words it: its `errorCode` and message, HTTP status and gRPC code. */
export class DaprError extends Error {
  constructor(
    readonly errorCode: string,
    message: string,
    readonly httpStatus: number,
    readonly grpcCode: number,
  ) {
    super(message);
  }
}

const malformed = (message: string) =>
  new DaprError('ERR_MALFORMED_REQUEST', message, 400, GRPC.INVALID_ARGUMENT);

/** A TryLock or Unlock request, its fields as Dapr's proto names them. */
export interface DaprLockRequest {
  storeName: string;
  resourceId: string;
  lockOwner: string;
}

export interface TryLockRequest extends DaprLockRequest {
  expiryInSeconds: number;
}

export type TryLockOutcome = { success: true; token: string } | { success: false };

/** `UnlockResponse.Status`: SUCCESS, LOCK_DOES_NOT_EXIST, LOCK_BELONGS_TO_OTHERS, INTERNAL_ERROR. */
export type UnlockStatus = 0 | 1 | 2 | 3;

const digest = (...parts: string[]) =>
  createHash('sha256').update(parts.join('\u0000'), 'utf8').digest('base64url');

/**
 * The dlm owner a Dapr `lockOwner` holds as. Owners are public (`lock.get`, the dashboard), and
 * `lockOwner` is what proves holding, so the owner is a hash of it: an app that knows its
 * `lockOwner` can compute it, nobody else can go the other way.
 */
export function daprOwner(lockOwner: string): string {
  return `dapr:${digest('dlm dapr owner', lockOwner).slice(0, 22)}`;
}

/** The lease key of `lockOwner`'s lease of `name`: any dlm server of the deployment derives it. */
function daprLeaseKey(name: string, lockOwner: string): string {
  return digest('dlm dapr lease key', name, lockOwner);
}

/** The lock a request is about, checked as Dapr checks it, in Dapr's order. */
function lockNameOf(stores: DaprOptions['stores'], request: DaprLockRequest): string {
  const { storeName, resourceId, lockOwner } = request;
  if (Object.keys(stores).length === 0) {
    throw new DaprError(
      'ERR_LOCK_STORE_NOT_CONFIGURED',
      'lock store is not configured (dlm: --dapr-stores NAME=PREFIX)',
      500,
      GRPC.FAILED_PRECONDITION,
    );
  }
  if (resourceId === '') throw malformed(`ResourceId is empty in lock store ${storeName}`);
  if (lockOwner === '') throw malformed(`LockOwner is empty in lock store ${storeName}`);
  const prefix = Object.hasOwn(stores, storeName) ? stores[storeName] : undefined;
  if (prefix === undefined) {
    throw new DaprError(
      'ERR_LOCK_STORE_NOT_FOUND',
      `lock store ${storeName} not found`,
      400,
      GRPC.INVALID_ARGUMENT,
    );
  }
  return prefix + resourceId;
}

/** A dlm error as Dapr's API words it; `failed` wraps what Dapr reports as the store failing. */
function daprErrorOf(
  error: unknown,
  request: DaprLockRequest,
  limits: Readonly<Limits>,
  failed: (text: string) => DaprError,
): DaprError {
  if (error instanceof DaprError) return error;
  if (!isDlmError(error)) return failed('internal error');
  switch (error.code) {
    case 'INVALID_PARAMS':
      return malformed(invalidMessage(error, request.storeName, limits));
    case 'FORBIDDEN':
      return new DaprError('ERR_PERMISSION_DENIED', error.message, 403, GRPC.PERMISSION_DENIED);
    case 'LIMIT_EXCEEDED':
      return new DaprError('ERR_TOO_MANY_REQUESTS', error.message, 429, GRPC.RESOURCE_EXHAUSTED);
    default:
      return failed(error.message);
  }
}

/** INVALID_PARAMS in Dapr's fields and units (seconds, not the milliseconds dlm counts in). */
function invalidMessage(error: DlmError, store: string, limits: Readonly<Limits>): string {
  if (error.details.field === 'ttlMs') {
    const least = Math.ceil(limits.minTtlMs / 1000);
    const most = Math.floor(limits.maxTtlMs / 1000);
    return `ExpiryInSeconds must be ${least}-${most} seconds in lock store ${store}`;
  }
  if (error.details.field === 'name') {
    return `ResourceId is not a valid lock name in lock store ${store}: ${error.message}`;
  }
  return `${error.message} in lock store ${store}`;
}

const tryLockFailed = (text: string) =>
  new DaprError('ERR_TRY_LOCK', `failed to try acquiring lock: ${text}`, 500, GRPC.INTERNAL);
const unlockFailed = (text: string) =>
  new DaprError('ERR_UNLOCK', `failed to release lock: ${text}`, 500, GRPC.INTERNAL);

/** Dapr's two lock calls over dlm, for whichever door received them. */
export interface DaprLocks {
  /** Dapr's own errors (`DaprError`), or the outcome with the grant's fencing token. */
  tryLock(principal: Principal, request: TryLockRequest): Promise<TryLockOutcome>;
  unlock(principal: Principal, request: DaprLockRequest): Promise<UnlockStatus>;
}

export function createDaprLocks(context: DoorContext, options: DaprOptions): DaprLocks {
  const { stores } = options;

  async function tryLock(principal: Principal, request: TryLockRequest): Promise<TryLockOutcome> {
    const startedAt = performance.now();
    const { expiryInSeconds, lockOwner } = request;
    let code = 'OK';
    const params = { name: '', ttlMs: expiryInSeconds * 1000, waitMs: 0, owner: '', leaseKey: '' };
    try {
      // Dapr checks the expiry before anything else.
      if (!(expiryInSeconds > 0)) {
        throw malformed(`ExpiryInSeconds is not positive in lock store ${request.storeName}`);
      }
      params.name = lockNameOf(stores, request);
      params.owner = daprOwner(lockOwner);
      params.leaseKey = daprLeaseKey(params.name, lockOwner);
      const grant = (await lockHandlers(requestScope(context, principal))['lock.acquire'](
        params,
        undefined,
      )) as { token: string };
      return { success: true, token: grant.token };
    } catch (error) {
      code = isDlmError(error) ? error.code : 'INVALID_PARAMS';
      // Held by another owner: Dapr's plain "no".
      if (isDlmError(error, 'LOCK_HELD')) return { success: false };
      throw daprErrorOf(error, request, context.service.limits, tryLockFailed);
    } finally {
      recordRequest(context.metrics, { id: 0, method: 'lock.acquire', params }, code, startedAt);
    }
  }

  /** Whose lease `name` is: none (1), another owner's (2), or this owner's, with its token. */
  async function holding(
    handlers: ReturnType<typeof lockHandlers>,
    name: string,
    owner: string,
  ): Promise<1 | 2 | string> {
    const state = (await handlers['lock.get']({ name }, undefined)) as {
      held: boolean;
      holders?: Array<{ owner: string; token: string }>;
    };
    if (!state.held) return 1;
    return state.holders?.find((holder) => holder.owner === owner)?.token ?? 2;
  }

  async function release(principal: Principal, request: DaprLockRequest): Promise<UnlockStatus> {
    const name = lockNameOf(stores, request);
    const scope = requestScope(context, principal);
    permittedName(scope, { name }, 'lock');
    const handlers = lockHandlers(scope);
    const owner = daprOwner(request.lockOwner);
    const leaseKey = daprLeaseKey(name, request.lockOwner);
    // A lease that ends between the look and the release is looked at again. The same lease
    // still there after NOT_HOLDER has this owner's name but another key: a dlm client that
    // named the owner, someone else's lease.
    let refused: string | undefined;
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const held = await holding(handlers, name, owner);
      if (held === 1 || held === 2) return held;
      if (held === refused) return 2;
      refused = held;
      try {
        await handlers['lock.release']({ name, token: held, leaseKey }, undefined);
        return 0;
      } catch (error) {
        if (!isDlmError(error, 'NOT_HOLDER')) throw error;
      }
    }
    return 3;
  }

  async function unlock(principal: Principal, request: DaprLockRequest): Promise<UnlockStatus> {
    const startedAt = performance.now();
    let code = 'OK';
    try {
      return await release(principal, request);
    } catch (error) {
      code = isDlmError(error) ? error.code : 'INVALID_PARAMS';
      // Whether the release happened is unknown: neither yes nor no, Dapr's INTERNAL_ERROR.
      if (isDlmError(error, 'UNAVAILABLE') && error.details.indeterminate) return 3;
      throw daprErrorOf(error, request, context.service.limits, unlockFailed);
    } finally {
      recordRequest(
        context.metrics,
        { id: 0, method: 'lock.release', params: {} },
        code,
        startedAt,
      );
    }
  }

  return { tryLock, unlock };
}
