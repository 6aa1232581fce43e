import { attempt } from './acquire-attempt.js';
import type { LockEvent } from './backend.js';
import { announce, holderChange } from './holder-view.js';
import { leaseHears, untrack } from './lease-tracking.js';
import type { Lease } from './lock-service.js';
import {
  dropIfIdle,
  isCurrent,
  type NameState,
  type QueuedAcquire,
  type ServiceContext,
  waitersChanged,
} from './name-state.js';
import { toLease } from './proofs.js';
import { WaitQueue } from './wait-queue.js';

/** The state the service keeps for `name`, made (and its backend watch started) on first use. */
export function openName(ctx: ServiceContext, name: string): NameState {
  const existing = ctx.names.get(name);
  if (existing) return existing;
  const state: NameState = {
    name,
    queue: undefined,
    leases: undefined,
    holders: undefined,
    lastEnded: undefined,
    told: undefined,
    checkTimer: undefined,
    checking: false,
    checkAgain: false,
    watchers: undefined,
    unsubscribe: () => {},
    busy: 0,
    queuedInBackend: undefined,
    waitingInBackend: 0,
  };
  ctx.names.set(name, state);
  state.unsubscribe = ctx.backend.watch(name, (event) => ctx.onEvent(state, event));
  return state;
}

/** The name's wait queue, made on the first wait. */
export function queueOf(ctx: ServiceContext, state: NameState): WaitQueue<QueuedAcquire, Lease> {
  state.queue ??= new WaitQueue<QueuedAcquire, Lease>(
    state.name,
    ctx.clock,
    ctx.settings.unknownTtlRetryMs,
    {
      attempt: (queued) => attempt(ctx, state, queued),
      granted: (queued, grant) => toLease(grant, queued.leaseKey, queued.request),
      abandoned: (queued, grant) => {
        untrack(ctx, state, grant.token);
        ctx.calls.releaseQuietly(grant, queued.request.keyHash);
      },
      waitingChanged: () => waitersChanged(ctx, state),
      idle: () => dropIfIdle(ctx, state),
      closed: () => ctx.closed,
    },
  );
  return state.queue;
}

/**
 * A backend event about the name (or an end a check found): the lease followed here hears it,
 * watchers are told what changed, and an end lets the queue's head ask again.
 */
export function onBackendEvent(ctx: ServiceContext, state: NameState, event: LockEvent): void {
  if (!isCurrent(ctx, state)) return;
  leaseHears(ctx, state, event);
  const change = holderChange(ctx, state, event);
  if (change) announce(state, change);
  if (event.type !== 'acquired' && state.queue?.length) state.queue.wake();
  dropIfIdle(ctx, state);
}
