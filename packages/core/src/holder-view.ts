import type { HolderState, LockEvent, LockState } from './backend.js';
import { leaseOf } from './lease-tracking.js';
import type { LockChange } from './lock-service.js';
import { followsEnd, isCurrent, type NameState, type ServiceContext } from './name-state.js';
import type { LockMode } from './validation.js';

/**
 * One lease this service believes holds a name, for the names whose end it must see for
 * itself: watched names, and leases granted here on a backend without expiry events. At its
 * deadline the backend is asked, and an end it did not report is reported from here.
 */
export interface HolderView {
  token: bigint;
  owner: string | undefined;
  /** On the service's clock; undefined until a grant or `inspect` told it. */
  expiresAt: number | undefined;
  /**
   * `COUNTED`, `ANNOUNCED` and `SHARED`, in one field: the view is kept for every held lock
   * this service follows, and each field is 8 bytes of heap.
   */
  flags: number;
}

/**
 * `expiresAt` is the backend's own count (from `inspect`), not the holder's earlier local one
 * (a grant here counts from the request's start, before the backend's lease began).
 */
const COUNTED = 1;
/** Watchers were told of this grant (by the backend's event or by a check). */
const ANNOUNCED = 2;
/** A shared holder (else exclusive). */
const SHARED = 4;

function has(view: HolderView, flag: number): boolean {
  return (view.flags & flag) !== 0;
}

function mark(view: HolderView, flag: number, on: boolean): void {
  view.flags = on ? view.flags | flag : view.flags & ~flag;
}

export function modeOfView(view: HolderView): LockMode {
  return has(view, SHARED) ? 'shared' : 'exclusive';
}

/**
 * The holders a name's state follows: none, one (kept bare: an exclusive lock, and a Map is
 * about 200 bytes per held name), or several shared holders by token.
 */
export type HolderViews = HolderView | Map<bigint, HolderView> | undefined;

/**
 * Why the backend is asked about a name's holders: an end it reported without saying whose, or
 * `unknown` (a deadline passed, a watch started, a grant's lease left is not known yet).
 */
export type EndType = 'expired' | 'released' | 'revoked' | 'unknown';

/** A check that finds the deadline later by more than this reports the lease `extended`. */
const EXTENDED_BY_MS = 250;
/** How long a lease found gone before its deadline waits for the backend's event about it. */
const EVENT_GRACE_MS = 250;
/** How soon a check that could not tell (the backend failed, or answered stale) asks again. */
const RECHECK_MS = 1_000;

export function viewOf(state: NameState, token: bigint): HolderView | undefined {
  const { holders } = state;
  if (holders === undefined) return undefined;
  if (holders instanceof Map) return holders.get(token);
  return holders.token === token ? holders : undefined;
}

const NO_VIEWS: readonly HolderView[] = [];

/** Every holder followed, by increasing token. */
export function viewsOf(state: NameState): readonly HolderView[] {
  const { holders } = state;
  if (holders === undefined) return NO_VIEWS;
  if (!(holders instanceof Map)) return [holders];
  return [...holders.values()].sort((a, b) => (a.token < b.token ? -1 : 1));
}

/** How many holders this service follows for the name. */
export function viewCount(state: NameState): number {
  const { holders } = state;
  if (holders === undefined) return 0;
  return holders instanceof Map ? holders.size : 1;
}

function highestView(state: NameState): HolderView | undefined {
  const { holders } = state;
  if (holders === undefined || !(holders instanceof Map)) return holders;
  let top: HolderView | undefined;
  for (const view of holders.values()) if (!top || view.token > top.token) top = view;
  return top;
}

function addView(state: NameState, view: HolderView): void {
  const { holders } = state;
  if (holders === undefined) state.holders = view;
  else if (holders instanceof Map) holders.set(view.token, view);
  else
    state.holders = new Map([
      [holders.token, holders],
      [view.token, view],
    ]);
}

function removeView(state: NameState, token: bigint): boolean {
  const { holders } = state;
  if (holders === undefined) return false;
  if (!(holders instanceof Map)) {
    if (holders.token !== token) return false;
    state.holders = undefined;
  } else {
    if (!holders.delete(token)) return false;
    if (holders.size === 1) state.holders = holders.values().next().value;
    else if (holders.size === 0) state.holders = undefined;
  }
  if (state.checking) state.checkAgain = true;
  return true;
}

/**
 * Records what is known of a holder. Undefined when `token` is old news. A new grant ends the
 * followed holders it could not be granted beside (every earlier one for an exclusive grant,
 * the exclusive ones for a shared grant): they are dropped without a report of their end, the
 * grant being the news. `schedule`: arm the next check (a caller adopting many holders arms it
 * once, after them all).
 */
export function see(
  ctx: ServiceContext,
  state: NameState,
  token: bigint,
  owner: string | undefined,
  expiresAt: number | undefined,
  mode: LockMode,
  schedule = true,
): HolderView | undefined {
  let view = viewOf(state, token);
  if (!view) {
    if (token === state.lastEnded) return undefined;
    const top = highestView(state);
    // Below an exclusive grant followed, or exclusive below any holder: ended already.
    if (top && token < top.token && (!has(top, SHARED) || mode === 'exclusive')) {
      return undefined;
    }
    if (!top && mode === 'exclusive' && state.lastEnded !== undefined && token < state.lastEnded) {
      return undefined;
    }
    for (const older of top ? viewsOf(state) : NO_VIEWS) {
      if (older.token < token && (mode === 'exclusive' || !has(older, SHARED))) {
        removeView(state, older.token);
      }
    }
    view = { token, owner, expiresAt: undefined, flags: mode === 'shared' ? SHARED : 0 };
    addView(state, view);
    if (state.checking) state.checkAgain = true;
  }
  view.owner = owner ?? view.owner;
  if (expiresAt !== undefined) {
    view.expiresAt = expiresAt;
    mark(view, COUNTED, false);
  }
  if (schedule) scheduleCheck(ctx, state);
  return view;
}

export function forgetHolders(state: NameState): void {
  state.holders = undefined;
  if (state.checking) state.checkAgain = true;
  cancelCheck(state);
}

export function cancelCheck(state: NameState): void {
  state.checkTimer?.cancel();
  state.checkTimer = undefined;
}

/** Asks the backend about the holders in `delayMs`. */
function checkLater(ctx: ServiceContext, state: NameState, endType: EndType, delayMs: number) {
  cancelCheck(state);
  state.checkTimer = ctx.clock.setTimer(() => {
    state.checkTimer = undefined;
    void check(ctx, state, endType);
  }, delayMs);
}

/**
 * When the next check is due: the soonest deadline among the holders, plus the check's delay;
 * 0 when a holder's deadline is not known yet; undefined without holders.
 */
function nextCheckInMs(ctx: ServiceContext, state: NameState): number | undefined {
  const { holders } = state;
  if (holders === undefined) return undefined;
  let soonest = Number.POSITIVE_INFINITY;
  for (const view of holders instanceof Map ? holders.values() : [holders]) {
    if (view.expiresAt === undefined) return 0;
    soonest = Math.min(soonest, view.expiresAt);
  }
  return soonest - ctx.clock.now() + ctx.settings.checkDelayMs;
}

/** Asks the backend at the soonest holder's deadline (at once when one is not known yet). */
export function scheduleCheck(ctx: ServiceContext, state: NameState): void {
  cancelCheck(state);
  if (ctx.closed || !followsEnd(ctx, state)) return;
  const delayMs = nextCheckInMs(ctx, state);
  if (delayMs === undefined) return;
  if (delayMs === 0) void check(ctx, state, 'unknown');
  else checkLater(ctx, state, 'unknown', delayMs);
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

/** Every holder a state lists (an adapter without shared modes lists only the top-level one). */
export function holdersOf(current: LockState): HolderState[] {
  return (
    current.holders ?? [
      { owner: current.owner, token: current.token, ttlRemainingMs: current.ttlRemainingMs },
    ]
  );
}

/** A lookup of an answer's holders by token (a Map only for several). */
function byToken(holders: HolderState[]): (token: bigint) => HolderState | undefined {
  if (holders.length <= 1) return (token) => (holders[0]?.token === token ? holders[0] : undefined);
  const map = new Map(holders.map((holder) => [holder.token, holder]));
  return (token) => map.get(token);
}

/**
 * Brings the holder views in line with what `inspect` said. A followed holder absent from an
 * answer whose highest token is at least its own has ended; one above the answer's highest
 * token makes the answer stale (older than what the events said): ask again, until that
 * holder's own deadline has passed.
 */
function reconcile(
  ctx: ServiceContext,
  state: NameState,
  current: LockState | null,
  endType: EndType,
): void {
  const answer = current ? holdersOf(current) : [];
  const find = byToken(answer);
  const now = ctx.clock.now();
  const mode: LockMode = current?.mode ?? 'exclusive';
  const hadViews = state.holders !== undefined;
  let stale = false;
  let graceEnds = false;
  const gone: HolderView[] = [];
  for (const view of viewsOf(state)) {
    const held = find(view.token);
    if (held) confirmHolder(ctx, state, view, held);
    else if (
      current &&
      view.token > current.token &&
      (view.expiresAt === undefined || now < view.expiresAt)
    ) {
      stale = true;
    } else if (endType === 'unknown' && (view.expiresAt === undefined || now < view.expiresAt)) {
      // Gone before its deadline: the backend's event about it (which says released or
      // revoked) is given a moment.
      view.expiresAt = now;
      mark(view, COUNTED, false);
      graceEnds = true;
    } else gone.push(view);
  }
  for (const view of gone) {
    holderGone(ctx, state, view, endType);
    if (!isCurrent(ctx, state)) return;
  }
  // Adopting a newer holder now would drop an ended one unreported: after the grace, then.
  if (!stale && !graceEnds) {
    for (const holder of answer) {
      if (!viewOf(state, holder.token)) adoptHolder(ctx, state, holder, mode);
    }
  }
  if (!hadViews && !current && endType !== 'unknown' && state.told !== false) {
    announce(state, { name: state.name, held: false, type: endType, holders: 0 });
  }
  if (stale || graceEnds) {
    // A deadline not known yet (0) must not turn the wait for a fresher answer into a spin.
    const due = nextCheckInMs(ctx, state);
    const dueMs = due === undefined || due === 0 ? Number.POSITIVE_INFINITY : due;
    const againMs = graceEnds ? EVENT_GRACE_MS : RECHECK_MS;
    checkLater(ctx, state, graceEnds ? 'unknown' : endType, Math.min(Math.max(dueMs, 1), againMs));
  } else scheduleCheck(ctx, state);
}

/** The backend still names a lease we follow: learn its deadline. */
function confirmHolder(
  ctx: ServiceContext,
  state: NameState,
  view: HolderView,
  held: HolderState,
): void {
  const expiresAt = ctx.clock.now() + held.ttlRemainingMs;
  // Only a deadline the backend counted before can show an extension: its lease ends a
  // little after a local grant's count, without anyone extending it; and a first deadline
  // (a grant heard of by its event) is news of no extension.
  const longer =
    has(view, COUNTED) &&
    view.expiresAt !== undefined &&
    expiresAt - view.expiresAt > EXTENDED_BY_MS;
  view.expiresAt = expiresAt;
  mark(view, COUNTED, true);
  view.owner ??= held.owner;
  // Watchers told the name was free hear of it; one followed since before the watch began is
  // what a new watcher reads for itself.
  if (!has(view, ANNOUNCED) && state.told === false) {
    mark(view, ANNOUNCED, true);
    announce(state, heldChange(ctx, state, 'acquired', view));
  } else if (longer && has(view, ANNOUNCED)) {
    announce(state, heldChange(ctx, state, 'extended', view));
  }
}

/**
 * A lease we follow is gone after its deadline, or the backend reported an end without saying
 * whose: the end is reported from here.
 */
function holderGone(ctx: ServiceContext, state: NameState, view: HolderView, endType: EndType) {
  // The lease ended and the backend did not say so (no expiry events, or a lost event), or
  // said so without saying whose. A lease held through here that was not released here is
  // reported lost: an end without a token may be anyone's (on Redlock, a failed attempt's
  // clean-up), and a holder must never miss its lock.lost.
  const type =
    endType === 'unknown' || (endType === 'released' && leaseOf(state, view.token))
      ? 'expired'
      : endType;
  ctx.onEvent(state, {
    name: state.name,
    type,
    token: view.token,
    mode: modeOfView(view),
    ...(view.owner === undefined ? {} : { owner: view.owner }),
  });
}

/** A holder the service did not know of: follow it from now on. */
function adoptHolder(
  ctx: ServiceContext,
  state: NameState,
  holder: HolderState,
  mode: LockMode,
): void {
  const expiresAt = ctx.clock.now() + holder.ttlRemainingMs;
  const adopted = see(ctx, state, holder.token, holder.owner, expiresAt, mode, false);
  if (!adopted) return;
  mark(adopted, COUNTED, true);
  // Watchers told something before hear of this holder (a shared one beside those they know
  // of, or any after the name was free). A new watcher reads the state itself, but the
  // backend's event about this grant may still be on its way: let it pass.
  if (state.told !== undefined) {
    mark(adopted, ANNOUNCED, true);
    announce(state, heldChange(ctx, state, 'acquired', adopted));
  }
}

function heldChange(
  ctx: ServiceContext,
  state: NameState,
  type: 'acquired' | 'extended',
  view: HolderView,
  holders = viewCount(state),
): LockChange {
  return {
    name: state.name,
    held: true,
    type,
    ...(view.owner === undefined ? {} : { owner: view.owner }),
    token: view.token,
    mode: modeOfView(view),
    holders: Math.max(1, holders),
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

/** Brings the holder views in line with a backend event: the change to tell, if any. */
export function holderChange(
  ctx: ServiceContext,
  state: NameState,
  event: LockEvent,
): LockChange | undefined {
  if (event.type === 'acquired') return grantSeen(ctx, state, event);
  // A request to let go changes no holder (`release-requests.ts` hears it).
  if (event.type === 'releaseRequested') return undefined;
  const { token } = event;
  if (token === undefined) {
    // The backend cannot say which lease ended (a wake-up after a reconnect; on Redlock, a
    // failed attempt's clean-up looks the same): where this service follows the holders, the
    // backend is asked, and watchers hear what it says.
    if (followsEnd(ctx, state)) {
      void check(ctx, state, event.type);
      return undefined;
    }
    const holders = event.holders ?? 0;
    return { name: state.name, held: holders > 0, type: event.type, holders };
  }
  const view = viewOf(state, token);
  if (!view) {
    const top = highestView(state);
    // Old news: reported already (the highest end reported is at least its token), or below
    // a holder followed now.
    const { lastEnded } = state;
    if ((lastEnded !== undefined && token <= lastEnded) || (top && token < top.token)) {
      return undefined;
    }
  }
  if (state.lastEnded === undefined || token > state.lastEnded) state.lastEnded = token;
  if (view) {
    removeView(state, token);
    scheduleCheck(ctx, state);
  }
  const holders = event.holders ?? viewCount(state);
  const mode = view ? modeOfView(view) : event.mode;
  return {
    name: state.name,
    held: holders > 0,
    type: event.type,
    token,
    ...(event.owner === undefined ? {} : { owner: event.owner }),
    ...(mode === undefined ? {} : { mode }),
    holders,
  };
}

/** A grant the backend reported: the `acquired` change, unless watchers heard of it already. */
function grantSeen(
  ctx: ServiceContext,
  state: NameState,
  event: LockEvent,
): LockChange | undefined {
  if (event.token === undefined) {
    // Whose grant? Ask, when this service follows the name's holders.
    if (followsEnd(ctx, state)) void check(ctx, state, 'unknown');
    const owner = event.owner === undefined ? {} : { owner: event.owner };
    const mode = event.mode === undefined ? {} : { mode: event.mode };
    const holders = event.holders ?? Math.max(1, viewCount(state));
    return { name: state.name, held: true, type: 'acquired', ...owner, ...mode, holders };
  }
  const view = see(ctx, state, event.token, event.owner, undefined, event.mode ?? 'exclusive');
  if (!view || has(view, ANNOUNCED)) return undefined;
  mark(view, ANNOUNCED, true);
  return heldChange(ctx, state, 'acquired', view, event.holders);
}
