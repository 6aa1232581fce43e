import type { LockEvent } from './backend.js';
import { announce, holderChange } from './holder-view.js';
import { leaseHears } from './lease-tracking.js';
import { dropIfIdle, isCurrent, type NameState, type ServiceContext } from './name-state.js';
import { leasesHearRequest } from './release-requests.js';
import { waitLoopOf } from './wait-loop.js';

/** The state the service keeps for `name`, made (and its backend watch started) on first use. */
export function openName(ctx: ServiceContext, name: string): NameState {
  const existing = ctx.names.get(name);
  if (existing) return existing;
  const state: NameState = {
    name,
    leases: undefined,
    holders: undefined,
    lastEnded: undefined,
    told: undefined,
    checkTimer: undefined,
    checking: false,
    checkAgain: false,
    watchers: undefined,
    unfollow: undefined,
    unsubscribe: () => {},
    busy: 0,
    waits: undefined,
    waiting: 0,
    places: undefined,
  };
  ctx.names.set(name, state);
  state.unsubscribe = ctx.backend.watch(name, (event) => ctx.onEvent(state, event));
  return state;
}

/**
 * A backend event about the name (or an end a check found): the lease followed here hears it,
 * watchers are told what changed, and an end wakes this service's FIFO head to ask again.
 */
export function onBackendEvent(ctx: ServiceContext, state: NameState, event: LockEvent): void {
  if (!isCurrent(ctx, state)) return;
  if (event.type === 'releaseRequested') {
    // Not a change of holder: only the holders followed here hear it.
    leasesHearRequest(ctx, state, event);
    return;
  }
  leaseHears(ctx, state, event);
  const change = holderChange(ctx, state, event);
  if (change) announce(state, change);
  if (event.type !== 'acquired' && state.waits?.size && ctx.local) {
    waitLoopOf(ctx.local, ctx.backend.kind).waits.report(state.name, { what: 'holder-ended' });
  }
  dropIfIdle(ctx, state);
}
