import type {
  Clock,
  Lease,
  LockChange,
  LockMode,
  LockObserver,
  LockService,
  LockState,
  LostEvent,
  ReleaseRequestResult,
  Unsubscribe,
} from '@dlm/core';
import { createFeedHistory, type FeedHistory } from './feed-history.js';
import { createFeedSubscribers, createWaitersBatch } from './feed-subscribers.js';
import { namesOf } from './lock-handlers.js';
import type { ListLocks } from './lock-observer.js';
import type { HoldEnd } from './metrics.js';
import { createPendingGrants } from './pending-grants.js';

export type FeedEventType =
  | 'acquired'
  | 'extended'
  | 'released'
  | 'expired'
  | 'revoked'
  | 'waiters';

/** One holder of a lock, as the feed knows it. */
export interface FeedHolder {
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
}

/**
 * A held lock as the feed knows it: `owner`, `token` and `ttlRemainingMs` of the holder with the
 * highest token, its mode (and limit, shared), and every holder by token.
 */
export interface FeedLock {
  name: string;
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
  mode: LockMode;
  limit?: number;
  holders: FeedHolder[];
  /** Waiters queued on this server. */
  waiters: number;
  /** How long the feed has known this lease: since its grant, if that was through this server. */
  heldMs: number;
}

/**
 * One change. `held` is the state after it; `owner` and `token` are those of the lease the event
 * is about (the ended one for released/expired/revoked).
 */
export interface FeedEvent {
  type: FeedEventType;
  name: string;
  held: boolean;
  owner?: string;
  token?: bigint;
  /** The mode of the lease the event is about (with `owner` and `token`). */
  mode?: LockMode;
  /** Shared: the holders' limit. */
  limit?: number;
  ttlRemainingMs?: number;
  /** The holders the feed knows of after the change. */
  holders: number;
  waiters: number;
}

export interface LockFeedOptions {
  /**
   * Core's lock service: its `watch` reports every grant, release and expiry of a name on any
   * backend (it checks each lease at its end where the backend has no expiry events), its
   * `waiters` the acquires queued here.
   */
  service: Pick<LockService, 'watch' | 'waiters'>;
  clock: Clock;
  /** Lists the backend's held locks, for those this server did not grant; absent: cannot. */
  list: ListLocks | undefined;
  /** A lease granted through this server ended, after being held `seconds`. */
  onHoldEnded?(end: HoldEnd, seconds: number): void;
}

/**
 * The server's live view of held locks: what the dashboard and `lock.watchPrefix` show.
 *
 * It derives from the lock service's events: as a `LockObserver` part it hears of the leases
 * granted, extended, released and lost through this server; for locks granted elsewhere on a
 * shared backend, `seed` lists them and core's watch of each name reports their grants,
 * releases, expiries and extensions. Core sees every lease's end, so the feed keeps no timers
 * of its own: a lease's deadline here only says how much of it is left.
 */
export interface LockFeed extends LockObserver {
  granted(lease: Lease, waitedMs?: number): void;
  extended(lease: Lease): void;
  released(name: string, token: bigint): void;
  lost(event: LostEvent): void;
  /** The number of acquires queued here for `name` is now `count`. */
  waiting(name: string, count: number): void;
  /**
   * An acquire of `names` for `owner` through this server started: a grant core's watch reports
   * for them meanwhile waits for this server's own report of it, with its lease and its wait
   * (see `pending-grants.ts`). Call the returned function once the acquire settled.
   */
  acquiring(names: readonly string[], owner: string): () => void;
  /** Adds the backend's held locks under `prefix` that the feed does not know yet. */
  seed(prefix: string): Promise<void>;
  /** Held locks under `prefix`, by name. */
  snapshot(prefix: string): FeedLock[];
  /** Calls `listener` for every change under `prefix` until the returned function is called. */
  subscribe(prefix: string, listener: (event: FeedEvent) => void): () => void;
  /** Leases granted (or extended) through this server that are still held. */
  readonly localHeld: number;
  /** Of `localHeld`, those held shared. */
  readonly localShared: number;
  /** The recent past: grants, ends and queued acquires, for a dashboard opened after them. */
  readonly history: FeedHistory;
  close(): void;
}

interface Entry {
  name: string;
  owner: string;
  token: bigint;
  /** Shared: the holders' limit; 0 for an exclusive lease. */
  limit: number;
  /**
   * On the feed's clock, in whole ms (as are the two below); undefined while a lease granted
   * elsewhere has not been inspected yet.
   */
  expiresAt: number | undefined;
  /** When this server granted it; undefined for leases granted elsewhere. */
  grantedAt: number | undefined;
  /** When the feed first knew of this lease. */
  knownAt: number;
  local: boolean;
  /**
   * Set while subscribed to core's changes of this name. Undefined otherwise, rather than a
   * no-op closure of each entry's own: 56 bytes per held lock.
   */
  unwatch: Unsubscribe | undefined;
}

/**
 * What a new entry starts from: a lease granted here, or one holder of a lock the backend listed
 * or reported. `limit` 0: exclusive.
 */
interface Opening {
  name: string;
  owner: string;
  token: bigint;
  limit: number;
  ttlRemainingMs: number | undefined;
}

/** One name's entries: one (every exclusive lock, most shared ones), or several, by token. */
type Slot = Entry | Entry[];

function entriesOf(slot: Slot | undefined): readonly Entry[] {
  return slot === undefined ? [] : Array.isArray(slot) ? slot : [slot];
}

/** The entry of the highest token. */
function topOf(slot: Slot | undefined): Entry | undefined {
  return slot === undefined ? undefined : Array.isArray(slot) ? slot[slot.length - 1] : slot;
}

/**
 * Whether a grant of `token` (shared when `limit` > 0) means `entry` has ended: an exclusive
 * grant ends every lease before it, a shared one only exclusive ones.
 */
function replaces(limit: number, token: bigint, entry: Entry): boolean {
  return entry.token < token && (limit === 0 || entry.limit === 0);
}

/** Whether a grant of `token` is older news than `entry`, which it could not coexist with. */
function staleBeside(limit: number, token: bigint, entry: Entry): boolean {
  return entry.token > token && (limit === 0 || entry.limit === 0);
}

/** A grant core's watch reported, as the feed opens it. `limit` 0: exclusive. */
interface SeenGrant {
  name: string;
  change: LockChange;
  token: bigint;
  limit: number;
}

/** A change of a lease's deadline by more than this is reported as `extended`. */
const EXTENDED_BY_MS = 250;

export function createLockFeed(options: LockFeedOptions): LockFeed {
  return new Feed(options);
}

/**
 * `service`, with every acquire through it told to `feed` while in flight, so that the feed
 * tells each grant made here once, from the acquire's own report (see `LockFeed.acquiring`).
 */
export function feedingAcquires(service: LockService, feed: LockFeed): LockService {
  async function tell<T>(names: readonly string[], owner: string, run: () => Promise<T>) {
    const settled = feed.acquiring(names, owner);
    try {
      return await run();
    } finally {
      settled();
    }
  }
  const told: Pick<LockService, 'acquire' | 'acquireAll'> = {
    acquire: (options) => tell([options.name], options.owner, () => service.acquire(options)),
    acquireAll: (options) =>
      tell(namesOf(options.locks), options.owner, () => service.acquireAll(options)),
  };
  return Object.assign({}, service, told);
}

function byName(a: FeedLock, b: FeedLock): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

class Feed implements LockFeed {
  private readonly entries = new Map<string, Slot>();
  private readonly subscribers = createFeedSubscribers();
  // Names touched while a backend listing was in flight: its answer about them is older than
  // what the feed knows, so it is dropped.
  private readonly readsInFlight = new Set<Set<string>>();
  private readonly waiters;
  readonly history: FeedHistory;
  private held = 0;
  /** Grants core reported that an acquire in flight here may have made (see `changed`). */
  private readonly pending = createPendingGrants<SeenGrant>();
  private heldShared = 0;
  private closed = false;

  constructor(private readonly options: LockFeedOptions) {
    this.history = createFeedHistory({ clock: options.clock });
    this.waiters = createWaitersBatch(
      (name) => options.service.waiters(name),
      (name) => {
        const entry = topOf(this.entries.get(name));
        this.emit('waiters', name, entry, entry !== undefined);
      },
    );
  }

  get localHeld(): number {
    return this.held;
  }

  get localShared(): number {
    return this.heldShared;
  }

  // ---- events of leases granted through this server (the observer part) ----

  granted(lease: Lease, waitedMs = 0): void {
    if (this.closed) return;
    this.pending.drop(lease.name, lease.token);
    const entry = this.find(lease.name, lease.token);
    if (entry) {
      // The same lease again: an idempotent re-acquire, or this server's own report of a grant
      // the backend already told the feed about.
      this.refresh(entry, lease.ttlMs);
      entry.owner = lease.owner;
      if (entry.local) this.emit('extended', lease.name, entry, true);
      else this.adopt(entry, true);
      return;
    }
    const limit = limitOf(lease);
    const others = entriesOf(this.entries.get(lease.name));
    if (others.some((other) => staleBeside(limit, lease.token, other))) return;
    this.endReplaced(lease.name, limit, lease.token);
    this.open(this.openingOf(lease), true, 'acquired', waitedMs);
  }

  extended(lease: Lease): void {
    if (this.closed) return;
    const entry = this.find(lease.name, lease.token);
    if (entry) {
      this.refresh(entry, lease.ttlMs);
      if (!entry.local) this.adopt(entry, false);
      this.emit('extended', lease.name, entry, true);
      return;
    }
    this.endReplaced(lease.name, limitOf(lease), lease.token);
    // A holder that reconnected here extends a lease granted elsewhere: it is ours now.
    this.open(this.openingOf(lease), true, 'extended');
  }

  released(name: string, token: bigint): void {
    this.pending.drop(name, token);
    const entry = this.find(name, token);
    if (entry) this.end(entry, 'released');
  }

  /** A release request through this server that found holders: the history shows it. */
  releaseRequested(request: ReleaseRequestResult): void {
    if (this.closed || request.notified === 0) return;
    this.history.record({ type: 'releaseRequested', name: request.name });
  }

  lost(event: LostEvent): void {
    this.pending.drop(event.name, event.token);
    const entry = this.find(event.name, event.token);
    // A lease at its cap on holding ran out there (its last extend was clamped to it).
    if (entry) this.end(entry, event.reason === 'maxHold' ? 'expired' : event.reason);
  }

  waiting(name: string, count: number): void {
    if (this.closed) return;
    this.history.queued(name, count);
    this.waiters.touch(name);
  }

  acquiring(names: readonly string[], owner: string): () => void {
    const acquire = this.pending.start(names, owner);
    return () => {
      // Core reported this acquire's grant (granted, before the acquire settled) if it made
      // one that is still held: what is left was made elsewhere, or has ended unreported.
      for (const seen of acquire.settled()) {
        if (!this.closed && !this.find(seen.name, seen.token)) this.openSeen(seen);
      }
    };
  }

  // ---- what watchers ask ----

  async seed(prefix: string): Promise<void> {
    const { list } = this.options;
    if (!list || this.closed) return;
    const touched = new Set<string>();
    this.readsInFlight.add(touched);
    let listed: LockState[];
    try {
      listed = await list(prefix);
    } finally {
      this.readsInFlight.delete(touched);
    }
    if (this.closed) return;
    for (const state of listed) {
      if (this.entries.has(state.name) || touched.has(state.name)) continue;
      const limit = state.mode === 'shared' ? (state.limit ?? 1) : 0;
      for (const holder of state.holders ?? [state]) {
        const { owner, token, ttlRemainingMs } = holder;
        this.open({ name: state.name, owner, token, limit, ttlRemainingMs }, false, null);
      }
    }
  }

  snapshot(prefix: string): FeedLock[] {
    const locks: FeedLock[] = [];
    for (const slot of this.entries.values()) {
      const entry = topOf(slot)!;
      if (!entry.name.startsWith(prefix)) continue;
      const all = entriesOf(slot);
      // Held since the first holder the feed knew of took it.
      const knownAt = Math.min(...all.map((one) => one.knownAt));
      locks.push({
        name: entry.name,
        owner: entry.owner,
        token: entry.token,
        ttlRemainingMs: this.remainingMs(entry),
        mode: entry.limit === 0 ? 'exclusive' : 'shared',
        ...(entry.limit === 0 ? {} : { limit: entry.limit }),
        holders: all.map((one) => ({
          owner: one.owner,
          token: one.token,
          ttlRemainingMs: this.remainingMs(one),
        })),
        waiters: this.options.service.waiters(entry.name),
        heldMs: Math.max(0, Math.round(this.options.clock.now() - knownAt)),
      });
    }
    return locks.sort(byName);
  }

  subscribe(prefix: string, listener: (event: FeedEvent) => void): () => void {
    // The first subscriber makes the feed follow the leases granted here too (see watch).
    if (this.subscribers.size === 0 && !this.closed) {
      for (const slot of this.entries.values()) this.watch(topOf(slot)!);
    }
    const remove = this.subscribers.add(prefix, listener);
    return () => {
      if (!remove() || this.subscribers.size > 0) return;
      for (const slot of this.entries.values()) {
        const all = entriesOf(slot);
        if (all.every((entry) => entry.local)) for (const entry of all) this.unwatch(entry);
      }
    };
  }

  close(): void {
    this.closed = true;
    this.pending.clear();
    this.waiters.close();
    for (const slot of this.entries.values())
      for (const entry of entriesOf(slot)) this.unwatch(entry);
    this.entries.clear();
    this.subscribers.clear();
    this.history.clear();
    this.held = 0;
    this.heldShared = 0;
  }

  // ---- entries ----

  private openingOf(lease: Lease): Opening {
    return {
      name: lease.name,
      owner: lease.owner,
      token: lease.token,
      limit: limitOf(lease),
      ttlRemainingMs: lease.ttlMs,
    };
  }

  /** The entry of `name` with `token`, if the feed knows it. */
  private find(name: string, token: bigint): Entry | undefined {
    const slot = this.entries.get(name);
    if (slot === undefined) return undefined;
    if (!Array.isArray(slot)) return slot.token === token ? slot : undefined;
    return slot.find((entry) => entry.token === token);
  }

  /** Ends, as expired, the entries of `name` a grant of `token` (shared when `limit`) ended. */
  private endReplaced(name: string, limit: number, token: bigint): void {
    const slot = this.entries.get(name);
    if (slot === undefined) return;
    for (const entry of [...entriesOf(slot)]) {
      if (replaces(limit, token, entry)) this.end(entry, 'expired');
    }
  }

  /** Adds `entry` to its name's entries, in token order. */
  private add(entry: Entry): void {
    const slot = this.entries.get(entry.name);
    if (slot === undefined) {
      this.entries.set(entry.name, entry);
      return;
    }
    const all = [...entriesOf(slot), entry].sort((a, b) =>
      a.token < b.token ? -1 : a.token > b.token ? 1 : 0,
    );
    this.entries.set(entry.name, all);
  }

  /** Takes `entry` out of its name's entries; false when it was not there. */
  private remove(entry: Entry): boolean {
    const slot = this.entries.get(entry.name);
    if (slot === entry) {
      this.entries.delete(entry.name);
      return true;
    }
    if (!Array.isArray(slot) || !slot.includes(entry)) return false;
    const rest = slot.filter((one) => one !== entry);
    this.entries.set(entry.name, rest.length === 1 ? rest[0]! : rest);
    return true;
  }

  /** Counts `entry` in (1) or out (-1) of the leases held through this server. */
  private count(entry: Entry, by: 1 | -1): void {
    this.held += by;
    if (entry.limit !== 0) this.heldShared += by;
  }

  /** How many holders of `name` the feed knows of. */
  private countOf(name: string): number {
    const slot = this.entries.get(name);
    return slot === undefined ? 0 : Array.isArray(slot) ? slot.length : 1;
  }

  private open(
    state: Opening,
    local: boolean,
    type: 'acquired' | 'extended' | null,
    waitedMs?: number,
  ): void {
    const now = this.wholeMs();
    const entry: Entry = {
      name: state.name,
      owner: state.owner,
      token: state.token,
      limit: state.limit,
      expiresAt: state.ttlRemainingMs === undefined ? undefined : now + state.ttlRemainingMs,
      grantedAt: local && type === 'acquired' ? now : undefined,
      knownAt: now,
      local,
      unwatch: undefined,
    };
    this.add(entry);
    this.touch(state.name);
    if (local) this.count(entry, 1);
    // One watch of core per name, on its first entry (handed on when that one ends).
    if (!local || this.subscribers.size > 0) this.watch(entry);
    if (type === 'acquired') {
      const { name, owner, token } = state;
      this.history.record({
        type,
        name,
        owner,
        token,
        ...(local && waitedMs !== undefined ? { waitedMs: Math.round(waitedMs) } : {}),
      });
    }
    if (type) this.emit(type, state.name, entry, true);
  }

  /** A lease granted elsewhere that this server now holds: by a re-acquire, or by an extend. */
  private adopt(entry: Entry, reacquired: boolean): void {
    entry.local = true;
    if (reacquired) entry.grantedAt = this.wholeMs();
    this.count(entry, 1);
  }

  private refresh(entry: Entry, ttlRemainingMs: number): void {
    entry.expiresAt = Math.floor(this.options.clock.now() + ttlRemainingMs);
    this.touch(entry.name);
  }

  private end(entry: Entry, type: HoldEnd): void {
    if (!this.remove(entry)) return;
    this.touch(entry.name);
    // The name's watch goes on with a holder that remains.
    const heir = topOf(this.entries.get(entry.name));
    if (heir && entry.unwatch && !heir.unwatch) {
      heir.unwatch = entry.unwatch;
      entry.unwatch = undefined;
    }
    this.unwatch(entry);
    const heldMs =
      entry.grantedAt === undefined ? undefined : this.options.clock.now() - entry.grantedAt;
    if (entry.local) {
      this.count(entry, -1);
      if (heldMs !== undefined) this.options.onHoldEnded?.(type, heldMs / 1000);
    }
    const { name, owner, token } = entry;
    this.history.record({
      type,
      name,
      owner,
      token,
      ...(heldMs === undefined ? {} : { heldMs: Math.round(heldMs) }),
    });
    this.emit(type, entry.name, entry, false);
  }

  private touch(name: string): void {
    for (const touched of this.readsInFlight) touched.add(name);
  }

  /**
   * The clock in whole ms, for the times an entry keeps: an integer is stored in the object
   * itself, a fraction in a 16-byte heap number of its own (three per held lock). Rounded down,
   * so a lease's time left is never reported longer than it is.
   */
  private wholeMs(): number {
    return Math.floor(this.options.clock.now());
  }

  private remainingMs(entry: Entry): number {
    if (entry.expiresAt === undefined) return 0;
    return Math.max(0, Math.ceil(entry.expiresAt - this.options.clock.now()));
  }

  // ---- following a name through core's watch ----

  /**
   * Follows `entry`'s name through core's watch. Leases granted elsewhere always need it; those
   * granted here only while someone watches a prefix (their release and loss reach the feed as
   * observer events), so a grant costs no subscription when nobody looks.
   */
  private watch(entry: Entry): void {
    if (this.closed) return;
    // One subscription per name, whichever of its entries keeps it.
    if (entriesOf(this.entries.get(entry.name)).some((one) => one.unwatch)) return;
    if (entry.unwatch) return;
    try {
      entry.unwatch = this.options.service.watch(entry.name, (change) =>
        this.changed(entry.name, change),
      );
    } catch {
      // The service is shutting down: nothing more will change.
    }
  }

  private unwatch(entry: Entry): void {
    const { unwatch } = entry;
    if (!unwatch) return;
    entry.unwatch = undefined;
    unwatch();
  }

  private changed(name: string, change: LockChange & { mode?: LockMode }): void {
    const slot = this.entries.get(name);
    if (slot === undefined || this.closed) return;
    const { token } = change;
    if (!change.held) {
      // Core reports an end without a token only once it found the lock free.
      this.pending.drop(name, token);
      for (const entry of [...entriesOf(slot)]) {
        if (token === undefined || token === entry.token) this.end(entry, endOf(change));
      }
      return;
    }
    if (token === undefined) return;
    const entry = this.find(name, token);
    if (change.type === 'released' || change.type === 'expired' || change.type === 'revoked') {
      // One of several holders ended; the others hold on.
      this.pending.drop(name, token);
      if (entry) this.end(entry, change.type);
      return;
    }
    if (entry) {
      this.extendedElsewhere(entry, change);
      return;
    }
    const limit = change.mode === 'shared' ? topOf(slot)!.limit || 1 : 0;
    const seen: SeenGrant = { name, change, token, limit };
    // A grant core heard of from the backend before its lease is known: perhaps one an acquire
    // in flight here made (a second shared holder, while the first keeps the name watched). Its
    // own report, with the lease and the wait, comes when that acquire returns, however long
    // the backend takes to answer it (a journal's fsync): the grant is told then, once.
    if (change.ttlRemainingMs === undefined && this.pending.covers(name, change.owner)) {
      this.pending.hold(name, token, change.owner, seen);
      return;
    }
    this.openSeen(seen);
  }

  /** Opens the entry of a grant core reported (made elsewhere, or not reported here). */
  private openSeen({ name, change, token, limit }: SeenGrant): void {
    const slot = this.entries.get(name);
    if (entriesOf(slot).some((other) => staleBeside(limit, token, other))) return;
    this.endReplaced(name, limit, token);
    const opening = { name, owner: change.owner ?? '', token, limit };
    this.open(
      Object.assign({}, opening, { ttlRemainingMs: change.ttlRemainingMs }),
      false,
      'acquired',
    );
  }

  /** Extended elsewhere, or the lease left of a grant made elsewhere is known now. */
  private extendedElsewhere(entry: Entry, change: LockChange): void {
    if (change.ttlRemainingMs === undefined) return;
    const before = entry.expiresAt;
    this.refresh(entry, change.ttlRemainingMs);
    if (before === undefined || Math.abs(entry.expiresAt! - before) > EXTENDED_BY_MS) {
      this.emit('extended', entry.name, entry, true);
    }
  }

  private emit(type: FeedEventType, name: string, entry: Entry | undefined, held: boolean): void {
    if (this.subscribers.size === 0) return;
    const holders = this.countOf(name);
    this.subscribers.emit({
      type,
      name,
      held: held || holders > 0,
      ...(entry
        ? {
            owner: entry.owner,
            token: entry.token,
            ...(entry.limit === 0
              ? { mode: 'exclusive' as const }
              : { mode: 'shared' as const, limit: entry.limit }),
          }
        : {}),
      ...(entry && held && entry.expiresAt !== undefined
        ? { ttlRemainingMs: this.remainingMs(entry) }
        : {}),
      holders,
      waiters: this.options.service.waiters(name),
    });
  }
}

/** How a lease ended, as core's watch tells it. */
function endOf(change: LockChange): HoldEnd {
  return change.type === 'acquired' || change.type === 'extended' ? 'expired' : change.type;
}

/** A lease's limit as the feed keeps it: 0 when exclusive. */
function limitOf(lease: Lease): number {
  return lease.mode === 'shared' ? (lease.limit ?? 1) : 0;
}
