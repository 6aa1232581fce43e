import type { LockBackend, LockEvent } from './backend.js';
import type { BackendCalls } from './backend-calls.js';
import type { Clock, Timer } from './clock.js';
import type { HolderViews } from './holder-view.js';
import type { TrackedLeases } from './lease-tracking.js';
import type { LocalRequest } from './local-queue.js';
import type { LockChange, LostEvent } from './lock-service.js';
import type { AroundBackendCall, Notify } from './observer.js';
import type { BackendQueue } from './queue-driver.js';
import type { QueuePlace } from './queue-positions.js';
import type { ReleaseRequestedEvent } from './release-requests.js';
import type { Limits, LockMode } from './validation.js';

/** The service's fixed settings, derived once from its options and the backend's capabilities. */
export interface ServiceSettings {
  /** Waiters allowed in one name's queue on this service (LIMIT_EXCEEDED past it). */
  maxWaiters: number;
  backendTimeoutMs: number;
  unknownTtlRetryMs: number;
  /**
   * With expiry events the backend tells us when a lease ends; otherwise a timer per tracked
   * lease asks the backend at the moment the lease would run out.
   */
  leaseTimers: boolean;
  /**
   * How long after a followed lease's deadline the backend is asked. Where the backend reports
   * expiries, that check is only a backstop (a lost event, an extend through another
   * instance): it waits for the backend's event first.
   */
  checkDelayMs: number;
}

/** What every unit of the service shares: the backend, time, the names it follows. */
export interface ServiceContext {
  readonly backend: LockBackend;
  readonly clock: Clock;
  readonly limits: Limits;
  readonly settings: ServiceSettings;
  readonly names: Map<string, NameState>;
  readonly calls: BackendCalls;
  readonly notify: Notify;
  /** Where a name's backend events go, and the ends a check finds (`backend-events.ts`). */
  readonly onEvent: (state: NameState, event: LockEvent) => void;
  /** The one validation of a request's name (`LockService.checkName`). */
  readonly checkName: (value: unknown) => string;
  /** Set by `close()`: nothing new starts and no timer is armed again. */
  closed: boolean;
  /** This service's FIFO (`local-queue.ts`), made by the first wait on a backend without a queue. */
  local?: BackendQueue<LocalRequest> | undefined;
}

/** What one of a name's queued acquires carries into the wait engine. */
export interface QueuedAcquire {
  request: {
    name: string;
    owner: string;
    ttlMs: number;
    keyHash: string;
    mode: LockMode;
    /** 1 for `exclusive`. */
    limit: number;
    /** Above 0 only: the lease's lock-delay (`AcquireRequest.lockDelayMs`). */
    lockDelayMs?: number | undefined;
    /** The lease's cap on holding (`AcquireRequest.maxHoldMs`), when asked. */
    maxHoldMs?: number | undefined;
  };
  leaseKey: string;
  onLost: ((event: LostEvent) => void) | undefined;
  onReleaseRequested: ((event: ReleaseRequestedEvent) => void) | undefined;
  /** The request's own wrapper of its backend calls (a tracer's spans), if any. */
  around: AroundBackendCall | undefined;
}

/** Everything the service keeps for one lock name; dropped when nothing needs it. */
export interface NameState {
  name: string;
  /** The leases this service granted and follows, by token (see `TrackedLeases`). */
  leases: TrackedLeases;
  /** The holders this service follows for the name (see `HolderViews`). */
  holders: HolderViews;
  /**
   * The highest token whose end watchers were told of: a second report of it, or the end of an
   * older lease not followed here, is dropped.
   */
  lastEnded: bigint | undefined;
  /** What watchers were last told: held (true), free (false), or nothing yet. */
  told: boolean | undefined;
  /** When to ask the backend about the holder (its deadline, or a retry). */
  checkTimer: Timer | undefined;
  checking: boolean;
  /** News arrived while a check was in flight: its answer is stale, ask again. */
  checkAgain: boolean;
  /** Made by the first watch (an empty Set costs 150 bytes, for every held name). */
  watchers: Set<(change: LockChange) => void> | undefined;
  /** While watchers are on the name: ends the backend's `followChanges`, where it has one. */
  unfollow: (() => void) | undefined;
  unsubscribe: () => void;
  /** Calls in flight for this name (acquire/extend): the state must outlive them. */
  busy: number;
  /**
   * The acquires waiting through this service (each one's signal), in the backend's queue or
   * this service's FIFO. Made by the first wait: most names are only ever try-locked and held.
   */
  waits: Set<AbortController> | undefined;
  /**
   * Of those, the ones that have had to wait (they slept: the lock was not free). An acquire that
   * may wait but finds the lock free is no waiter, and no contention.
   */
  waiting: number;
  /**
   * Those waiters' places, in the order they started waiting (`queue-positions.ts`): what
   * `lock.queued` positions count. Made by the first one.
   */
  places: QueuePlace[] | undefined;
}

/** Whether `state` is still the one the service keeps for its name (not dropped, not closed). */
export function isCurrent(ctx: ServiceContext, state: NameState): boolean {
  return ctx.names.get(state.name) === state;
}

/**
 * Whether this service must see the current lease end for itself: someone watches the name,
 * or a holder here waits to be told it lost a lease on a backend without expiry events.
 */
export function followsEnd(ctx: ServiceContext, state: NameState): boolean {
  return (
    (state.watchers?.size ?? 0) > 0 || (ctx.settings.leaseTimers && state.leases !== undefined)
  );
}

/** Acquires waiting in this service for the name: only those that had to (see `waiting`). */
export function waitersOf(state: NameState): number {
  return state.waiting;
}

export function waitersChanged(ctx: ServiceContext, state: NameState): void {
  ctx.notify('waiting', state.name, waitersOf(state));
}

/** Forgets the name once nothing needs it: no waits, no lease, no watchers, no calls. */
export function dropIfIdle(ctx: ServiceContext, state: NameState): void {
  if (state.waits?.size || state.leases !== undefined || state.watchers?.size || state.busy) return;
  if (!isCurrent(ctx, state)) return;
  ctx.names.delete(state.name);
  state.checkTimer?.cancel();
  state.unsubscribe();
}
