import type { LockEvent, LockState } from './backend.js';
import type { LockChange } from './lock-service.js';
import { followsEnd, isCurrent, type NameState, type ServiceContext } from './name-state.js';

/**
 * The lease this service believes holds a name, for the names whose end it must see for
 * itself: watched names, and leases granted here on a backend without expiry events. At its
 * deadline the backend is asked, and an end it did not report is reported from here.
 */
export interface HolderView {
  token: bigint;
  owner: string | undefined;
  /** On the service's clock; undefined until a grant or `inspect` told it. */
  expiresAt: number | undefined;
  /**
   * `expiresAt` is the backend's own count (from `inspect`), not the holder's earlier local one
   * (a grant here counts from the request's start, before the backend's lease began).
   */
  counted: boolean;
  /** Watchers were told of this grant (by the backend's event or by a check). */
  announced: boolean;
}

/**
 * Why the backend is asked about a name's holder: an end it reported without saying whose, or
 * `unknown` (a deadline passed, a watch started, a grant's lease left is not known yet).
 */
export type EndType = 'expired' | 'released' | 'revoked' | 'unknown';

/** A check that finds the deadline later by more than this reports the lease `extended`. */
const EXTENDED_BY_MS = 250;
/** How long a lease found gone before its deadline waits for the backend's event about it. */
const EVENT_GRACE_MS = 250;
/** How soon a check that could not tell (the backend failed, or answered stale) asks again. */
const RECHECK_MS = 1_000;

/** Records what is known of the current holder. Undefined when `token` is old news. */
export function see(
  ctx: ServiceContext,
  state: NameState,
  token: bigint,
  owner: string | undefined,
  expiresAt: number | undefined,
): HolderView | undefined {
  let view = state.holder;
  if (view && token < view.token) return undefined;
  if (!view && state.lastEnded !== undefined && token <= state.lastEnded) return undefined;
  if (!view || view.token !== token) {
    view = { token, owner, expiresAt: undefined, counted: false, announced: false };
    state.holder = view;
    if (state.checking) state.checkAgain = true;
  }
  view.owner = owner ?? view.owner;
  if (expiresAt !== undefined) {
    view.expiresAt = expiresAt;
    view.counted = false;
  }
  scheduleCheck(ctx, state);
  return view;
}

export function forgetHolder(state: NameState): void {
  state.holder = undefined;
  if (state.checking) state.checkAgain = true;
  cancelCheck(state);
}

export function cancelCheck(state: NameState): void {
  state.checkTimer?.cancel();
  state.checkTimer = undefined;
}

/** Asks the backend about the holder in `delayMs`. */
function checkLater(ctx: ServiceContext, state: NameState, endType: EndType, delayMs: number) {
  state.checkTimer = ctx.clock.setTimer(() => {
    state.checkTimer = undefined;
    void check(ctx, state, endType);
  }, delayMs);
}

/** Asks the backend at the holder's deadline (at once when the deadline is not known yet). */
export function scheduleCheck(ctx: ServiceContext, state: NameState): void {
  cancelCheck(state);
  const view = state.holder;
  if (!view || ctx.closed || !followsEnd(ctx, state)) return;
  if (view.expiresAt === undefined) {
    void check(ctx, state, 'unknown');
    return;
  }
  checkLater(ctx, state, 'unknown', view.expiresAt - ctx.clock.now() + ctx.settings.checkDelayMs);
}

/**
 * Asks the backend who holds the name and tells watchers what changed: a lease that is gone
 * ends with `endType` (the backend did not report it, or reported an end without saying
 * whose), one extended elsewhere moves its deadline, a holder not known yet is adopted.
 */
export async function check(ctx: ServiceContext, state: NameState, endType: EndType) {
  if (state.checking) {
    state.checkAgain = true;
    return;
  }
  state.checking = true;
  state.checkAgain = false;
  cancelCheck(state);
  let current: LockState | null;
  try {
    current = await ctx.calls.bounded('inspect', 'inspect', () => ctx.backend.inspect(state.name));
  } catch {
    state.checking = false;
    // Cannot tell right now (a holder here has its own local deadline): ask again soon.
    if (isCurrent(ctx, state) && followsEnd(ctx, state) && !ctx.closed) {
      checkLater(ctx, state, endType, RECHECK_MS);
    }
    return;
  }
  state.checking = false;
  if (!isCurrent(ctx, state) || ctx.closed) return;
  if (state.checkAgain) {
    // Events arrived while the answer was on its way: it may be older than they are.
    void check(ctx, state, endType);
    return;
  }
  reconcile(ctx, state, current, endType);
}

/** Brings the holder view in line with what `inspect` said. */
function reconcile(
  ctx: ServiceContext,
  state: NameState,
  current: LockState | null,
  endType: EndType,
): void {
  const view = state.holder;
  if (view && current && current.token <= view.token) {
    confirmHolder(ctx, state, view, current, endType);
    return;
  }
  if (view) {
    if (!holderGone(ctx, state, view, endType)) return;
  } else if (!current && endType !== 'unknown' && state.told !== false) {
    announce(state, { name: state.name, held: false, type: endType });
  }
  if (current && !state.holder) adoptHolder(ctx, state, current);
}

/** The backend still names the lease we follow (or an older one): learn its deadline. */
function confirmHolder(
  ctx: ServiceContext,
  state: NameState,
  view: HolderView,
  current: LockState,
  endType: EndType,
): void {
  if (current.token < view.token) {
    // An answer older than what the events said: ask again a little later.
    checkLater(ctx, state, endType, RECHECK_MS);
    return;
  }
  const expiresAt = ctx.clock.now() + current.ttlRemainingMs;
  // Only a deadline the backend counted before can show an extension: its lease ends a
  // little after a local grant's count, without anyone extending it.
  const longer =
    view.expiresAt === undefined || (view.counted && expiresAt - view.expiresAt > EXTENDED_BY_MS);
  view.expiresAt = expiresAt;
  view.counted = true;
  view.owner ??= current.owner;
  if (!view.announced && state.told === false) {
    view.announced = true;
    announce(state, heldChange(ctx, state, 'acquired', view));
  } else if (longer && view.announced) {
    announce(state, heldChange(ctx, state, 'extended', view));
  }
  scheduleCheck(ctx, state);
}

/**
 * The lease we follow is gone. Before its deadline, the backend's event about it (which says
 * released or revoked) is given a moment; after it, or when the backend reported an end without
 * saying whose, the end is reported from here. False: nothing more to do for now.
 */
function holderGone(
  ctx: ServiceContext,
  state: NameState,
  view: HolderView,
  endType: EndType,
): boolean {
  const now = ctx.clock.now();
  if (endType === 'unknown' && (view.expiresAt === undefined || now < view.expiresAt)) {
    view.expiresAt = now;
    view.counted = false;
    checkLater(ctx, state, 'unknown', EVENT_GRACE_MS);
    return false;
  }
  // The lease ended and the backend did not say so (no expiry events, or a lost event), or
  // said so without saying whose. A lease held through here that was not released here is
  // reported lost: an end without a token may be anyone's (on Redlock, a failed attempt's
  // clean-up), and a holder must never miss its lock.lost.
  const type =
    endType === 'unknown' || (endType === 'released' && state.lease?.token === view.token)
      ? 'expired'
      : endType;
  ctx.onEvent(state, {
    name: state.name,
    type,
    token: view.token,
    ...(view.owner === undefined ? {} : { owner: view.owner }),
  });
  return isCurrent(ctx, state);
}

/** A holder the service did not know of: follow it from now on. */
function adoptHolder(ctx: ServiceContext, state: NameState, current: LockState): void {
  const adopted = see(
    ctx,
    state,
    current.token,
    current.owner,
    ctx.clock.now() + current.ttlRemainingMs,
  );
  if (adopted) adopted.counted = true;
  // Watchers told it was free hear that it is held again. A new watcher reads the state
  // itself, but the backend's event about this grant may still be on its way: let it pass.
  if (adopted && state.told === false) {
    adopted.announced = true;
    announce(state, heldChange(ctx, state, 'acquired', adopted));
  }
}

function heldChange(
  ctx: ServiceContext,
  state: NameState,
  type: 'acquired' | 'extended',
  view: HolderView,
): LockChange {
  return {
    name: state.name,
    held: true,
    type,
    ...(view.owner === undefined ? {} : { owner: view.owner }),
    token: view.token,
    ...(view.expiresAt === undefined
      ? {}
      : { ttlRemainingMs: Math.max(0, Math.ceil(view.expiresAt - ctx.clock.now())) }),
  };
}

/** Tells the name's watchers; a watcher that throws does not stop the others. */
export function announce(state: NameState, change: LockChange): void {
  state.told = change.held;
  if (!state.watchers) return;
  for (const watcher of state.watchers) {
    try {
      watcher(change);
    } catch {}
  }
}

/** Brings the holder view in line with a backend event: the change to tell, if any. */
export function holderChange(
  ctx: ServiceContext,
  state: NameState,
  event: LockEvent,
): LockChange | undefined {
  if (event.type === 'acquired') return grantSeen(ctx, state, event);
  const { token } = event;
  const view = state.holder;
  if (token === undefined) {
    // The backend cannot say which lease ended (a wake-up after a reconnect; on Redlock, a
    // failed attempt's clean-up looks the same): where this service follows the holder, the
    // backend is asked, and watchers hear what it says.
    if (followsEnd(ctx, state)) {
      void check(ctx, state, event.type);
      return undefined;
    }
    return { name: state.name, held: false, type: event.type };
  }
  if (token === state.lastEnded || (view && token < view.token)) return undefined;
  state.lastEnded = token;
  if (view?.token === token) forgetHolder(state);
  const owner = event.owner === undefined ? {} : { owner: event.owner };
  return { name: state.name, held: false, type: event.type, token, ...owner };
}

/** A grant the backend reported: the `acquired` change, unless watchers heard of it already. */
function grantSeen(
  ctx: ServiceContext,
  state: NameState,
  event: LockEvent,
): LockChange | undefined {
  if (event.token === undefined) {
    // Whose grant? Ask, when this service follows the name's holder.
    if (followsEnd(ctx, state)) void check(ctx, state, 'unknown');
    const owner = event.owner === undefined ? {} : { owner: event.owner };
    return { name: state.name, held: true, type: 'acquired', ...owner };
  }
  const view = see(ctx, state, event.token, event.owner, undefined);
  if (!view || view.announced) return undefined;
  view.announced = true;
  return heldChange(ctx, state, 'acquired', view);
}
