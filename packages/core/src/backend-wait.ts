import type { AcquireResult, Grant } from './backend.js';
import { isDlmError } from './errors.js';
import { track } from './lease-tracking.js';
import { cancelledError, conflictError, lockHeld, tooManyWaiters } from './lock-errors.js';
import type { AcquireOptions, Lease } from './lock-service.js';
import {
  type NameState,
  type QueuedAcquire,
  type ServiceContext,
  waitersChanged,
} from './name-state.js';
import { toLease } from './proofs.js';

/**
 * A wait in the backend's own queue (fair across servers). The deadline and the caller's
 * signal abort it; the adapter dequeues and answers `granted: false`.
 */
export async function waitInBackend(
  ctx: ServiceContext,
  state: NameState,
  options: AcquireOptions,
  { request, leaseKey, around }: QueuedAcquire,
  waitMs: number,
): Promise<Lease> {
  if ((state.queuedInBackend?.size ?? 0) >= ctx.settings.maxWaiters)
    throw tooManyWaiters(request.name);
  const { clock, calls, backend } = ctx;
  const controller = new AbortController();
  const cancelled = cancelledError();
  const deadline = clock.setTimer(
    () => controller.abort(lockHeld(request.name, undefined)),
    waitMs,
  );
  const onAbort = () => controller.abort(cancelled);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  state.queuedInBackend ??= new Set();
  state.queuedInBackend.add(controller);
  let waiting = false;
  const onWaiting = () => {
    if (waiting || !state.queuedInBackend?.has(controller)) return;
    waiting = true;
    state.waitingInBackend += 1;
    waitersChanged(ctx, state);
  };
  try {
    // The backend call may run as long as the wait; the backstop counts from the deadline.
    const result = await calls.bounded(
      'acquire',
      'acquireQueued',
      () => backend.acquireQueued!({ ...request, signal: controller.signal, onWaiting }),
      (late) => {
        if (late.granted) calls.releaseQuietly(late.grant, request.keyHash);
      },
      waitMs + ctx.settings.backendTimeoutMs,
      around,
    );
    const grant = grantOf(ctx, result, controller.signal, request);
    const proof = { leaseKey, keyHash: request.keyHash };
    track(ctx, state, grant, proof, request, clock.now(), options.onLost);
    return toLease(grant, leaseKey, request);
  } finally {
    deadline.cancel();
    options.signal?.removeEventListener('abort', onAbort);
    state.queuedInBackend?.delete(controller);
    if (waiting) {
      state.waitingInBackend -= 1;
      waitersChanged(ctx, state);
    }
  }
}

/**
 * The grant the backend's queue answered with, or why the wait failed: a conflict (the request
 * can never be granted as asked: INVALID_PARAMS), its deadline (LOCK_HELD, with the holder's
 * lease left when the backend said it), its signal, or the service's close.
 */
function grantOf(
  ctx: ServiceContext,
  result: AcquireResult,
  signal: AbortSignal,
  request: QueuedAcquire['request'],
): Grant {
  if (result.granted && !signal.aborted) return result.grant;
  // Granted just as the wait ended: nobody will use it.
  if (result.granted) ctx.calls.releaseQuietly(result.grant, request.keyHash);
  else if (result.conflict) throw conflictError(request, result.conflict);
  const reason: unknown = signal.reason;
  if (isDlmError(reason) && reason.code === 'LOCK_HELD' && !result.granted) {
    throw lockHeld(request.name, result.ttlRemainingMs);
  }
  throw isDlmError(reason) ? reason : lockHeld(request.name, undefined);
}
