import { reportable } from './acquire-attempt.js';
import type { Grant } from './backend.js';
import { isDlmError } from './errors.js';
import { track } from './lease-tracking.js';
import { type LocalRequest, localLoop } from './local-queue.js';
import { cancelledError, conflictError, lockHeld, tooManyWaiters } from './lock-errors.js';
import type { AcquireOptions, Lease } from './lock-service.js';
import {
  type NameState,
  type QueuedAcquire,
  type ServiceContext,
  waitersChanged,
} from './name-state.js';
import { toLease } from './proofs.js';
import { backendQueueOf, enterQueue, leaveQueue, type QueuePlace } from './queue-positions.js';
import { requestRelease } from './release-requests.js';
import { type WaitOutcome, waitLoopOf } from './wait-loop.js';

/**
 * An acquire that waits: the one wait loop (`wait-loop.ts`) over the backend's own queue where
 * it has one (`LockBackend.queue`: fair across dlm servers), else over this service's FIFO
 * (`local-queue.ts`). This is the one deadline and abort (a signal the deadline and the
 * caller's cancellation abort), the one check that no grant is reported whose lease is already
 * over (S5, `reportable`), and the one place that hands back a grant nobody will use.
 */
export async function waitForGrant(
  ctx: ServiceContext,
  state: NameState,
  options: AcquireOptions,
  queued: QueuedAcquire,
  waitMs: number,
): Promise<Lease> {
  const { request, leaseKey } = queued;
  if ((state.waits?.size ?? 0) >= ctx.settings.maxWaiters) throw tooManyWaiters(request.name);
  const controller = new AbortController();
  const deadline = ctx.clock.setTimer(
    () => controller.abort(lockHeld(request.name, undefined)),
    waitMs,
  );
  const cancelled = cancelledError();
  const onAbort = () => controller.abort(cancelled);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  state.waits ??= new Set();
  state.waits.add(controller);
  // Counted among the name's waiters only once it has to wait (not when it finds the lock free).
  let waiting = false;
  // Told its place among this service's waiters, or the backend's queue's (the loop tells it).
  const backendQueue = backendQueueOf(ctx.backend) !== undefined;
  const place: QueuePlace = { tell: backendQueue ? undefined : options.onQueued, told: 0 };
  const onWaiting = () => {
    waiting = true;
    state.waiting += 1;
    enterQueue(state, place);
    waitersChanged(ctx, state);
    // Asked when it starts to wait, once: the holders it waits behind hear it.
    if (options.requestRelease) {
      requestRelease(ctx, { name: request.name }).catch(() => {});
    }
  };
  try {
    const onPosition = backendQueue ? options.onQueued : undefined;
    const outcome = await waitInQueue(
      ctx,
      queued,
      controller.signal,
      waitMs,
      onWaiting,
      onPosition,
    );
    const { grant, elapsedMs } = grantOf(ctx, outcome, controller.signal, request);
    const proof = { leaseKey, keyHash: request.keyHash };
    track(ctx, state, grant, proof, request, ctx.clock.now() - elapsedMs, options);
    return toLease(grant, leaseKey, request);
  } finally {
    deadline.cancel();
    options.signal?.removeEventListener('abort', onAbort);
    state.waits.delete(controller);
    if (waiting) {
      state.waiting -= 1;
      leaveQueue(state, place);
      waitersChanged(ctx, state);
    }
  }
}

/** How a wait ended, with a grant's age (since its write was sent) on the service's terms. */
type Waited =
  | Exclude<WaitOutcome, { kind: 'granted' }>
  | { kind: 'granted'; grant: Grant; elapsedMs: number };

function waitInQueue(
  ctx: ServiceContext,
  { request, around }: QueuedAcquire,
  signal: AbortSignal,
  waitMs: number,
  onWaiting: () => void,
  onPosition: ((position: number) => void) | undefined,
): Promise<Waited> {
  const { backend, calls } = ctx;
  const queue = backend.capabilities.fairQueue ? backend.queue : undefined;
  if (!queue) {
    const local: LocalRequest = Object.assign({}, request, { around });
    return localLoop(ctx)
      .run(local, signal, onWaiting)
      .then((outcome) => aged(ctx.clock.now(), outcome));
  }
  const loop = waitLoopOf(queue, backend.kind);
  // The whole wait in the backend's queue is one observed backend call (`acquireQueued`, the
  // operation's name for it); its backstop counts from the deadline, and a grant that comes
  // after it is handed back.
  return calls
    .bounded(
      'acquire',
      'acquireQueued',
      () => loop.run(request, signal, onWaiting, onPosition),
      (late) => {
        if (late.kind === 'granted') calls.releaseQuietly(late.grant, request.keyHash);
      },
      waitMs + ctx.settings.backendTimeoutMs,
      around,
    )
    .then((outcome) => aged(queue.clock.now(), outcome));
}

/** The outcome, with a grant's age measured on the clock its `sentAt` was read on. */
function aged(now: number, outcome: WaitOutcome): Waited {
  if (outcome.kind !== 'granted') return outcome;
  return { kind: 'granted', grant: outcome.grant, elapsedMs: now - outcome.sentAt };
}

/**
 * The grant the wait ended with, or why it failed: a conflict (the request can never be granted
 * as asked: INVALID_PARAMS), its deadline (LOCK_HELD, with the holder's lease left when last
 * seen), its signal, or the service's close. A grant that came as the wait ended is handed back.
 */
function grantOf(
  ctx: ServiceContext,
  outcome: Waited,
  signal: AbortSignal,
  request: QueuedAcquire['request'],
): { grant: Grant; elapsedMs: number } {
  if (outcome.kind === 'conflict') throw conflictError(request, outcome.conflict);
  if (outcome.kind === 'granted') {
    if (!signal.aborted) {
      reportable(ctx, outcome.grant, outcome.elapsedMs, request.keyHash);
      return outcome;
    }
    // Granted just as the wait ended: nobody will use it.
    ctx.calls.releaseQuietly(outcome.grant, request.keyHash);
  }
  const reason: unknown = signal.reason;
  if (isDlmError(reason, 'LOCK_HELD')) {
    throw lockHeld(request.name, outcome.kind === 'ended' ? outcome.ttlRemainingMs : undefined);
  }
  throw isDlmError(reason) ? reason : lockHeld(request.name, undefined);
}
