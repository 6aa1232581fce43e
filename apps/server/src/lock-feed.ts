import type {
  Clock,
  Lease,
  LockBackend,
  LockChange,
  LockService,
  LockState,
  Unsubscribe,
} from '@dlm/core';
import { withDeadline } from './deadline.js';
import type { HoldEnd } from './metrics.js';

export type FeedEventType =
  | 'acquired'
  | 'extended'
  | 'released'
  | 'expired'
  | 'revoked'
  | 'waiters';

/** A held lock as the feed knows it. */
export interface FeedLock {
  name: string;
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
  /** Waiters queued on this server. */
  waiters: number;
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
  ttlRemainingMs?: number;
  waiters: number;
}

export interface LockFeedOptions {
  /** The backend, to list the locks this server did not grant itself. */
  backend: LockBackend;
  /**
   * Core's lock service, whose `watch` reports every grant, release and expiry of a name on any
   * backend (it checks each lease at its end where the backend has no expiry events).
   */
  service: Pick<LockService, 'watch'>;
  clock: Clock;
  /** Waiters queued on this server for a name. */
  waiters(name: string): number;
  /** A lease granted through this server ended, after being held `seconds`. */
  onHoldEnded?(end: HoldEnd, seconds: number): void;
  /** Backstop for the feed's own backend calls. */
  backendTimeoutMs: number;
}

/**
 * The server's live view of held locks: what the dashboard and `lock.watchPrefix` show.
 *
 * It is fed by what passes through this server (grants, extends, releases and lost leases,
 * reported by the observed lock service) and, for locks granted elsewhere on a shared backend,
 * by core's watch of each name: `seed` lists them, and the watch reports their grants,
 * releases, expiries and extensions (core checks a lease at its end where the backend does not
 * report expiries, so the feed keeps no timers of its own).
 */
export interface LockFeed {
  granted(lease: Lease): void;
  extended(lease: Lease): void;
  released(name: string, token: bigint): void;
  ended(name: string, token: bigint, reason: 'expired' | 'revoked'): void;
  /** The number of waiters for `name` may have changed (reported once per turn, if it did). */
  waitersChanged(name: string): void;
  /** Adds the backend's held locks under `prefix` that the feed does not know yet. */
  seed(prefix: string): Promise<void>;
  /** Held locks under `prefix`, by name. */
  snapshot(prefix: string): FeedLock[];
  /** Calls `listener` for every change under `prefix` until the returned function is called. */
  subscribe(prefix: string, listener: (event: FeedEvent) => void): () => void;
  /** Leases granted (or extended) through this server that are still held. */
  readonly localHeld: number;
  close(): void;
}

interface Entry {
  name: string;
  owner: string;
  token: bigint;
  /** On the feed's clock; undefined while a lease granted elsewhere has not been inspected yet. */
  expiresAt: number | undefined;
  /** When this server granted it; undefined for leases granted elsewhere. */
  grantedAt: number | undefined;
  local: boolean;
  unwatch: Unsubscribe;
  /** Subscribed to core's changes of this name. */
  watching: boolean;
}

interface Subscriber {
  prefix: string;
  listener: (event: FeedEvent) => void;
}

/** A change of a lease's deadline by more than this is reported as `extended`. */
const EXTENDED_BY_MS = 250;

export function createLockFeed(options: LockFeedOptions): LockFeed {
  const { backend, service, clock } = options;
  const entries = new Map<string, Entry>();
  const subscribers = new Set<Subscriber>();
  // Names touched while an asynchronous backend read was in flight: its answer about them is
  // older than what the feed knows, so it is dropped.
  const readsInFlight = new Set<Set<string>>();
  const dirtyWaiters = new Set<string>();
  const lastWaiters = new Map<string, number>();
  let waitersFlush: NodeJS.Immediate | undefined;
  let localHeld = 0;
  let closed = false;

  function touch(name: string): void {
    for (const touched of readsInFlight) touched.add(name);
  }

  function remainingMs(entry: Entry): number {
    if (entry.expiresAt === undefined) return 0;
    return Math.max(0, Math.ceil(entry.expiresAt - clock.now()));
  }

  function emit(type: FeedEventType, name: string, entry: Entry | undefined, held: boolean): void {
    if (subscribers.size === 0) return;
    const event: FeedEvent = {
      type,
      name,
      held,
      ...(entry ? { owner: entry.owner, token: entry.token } : {}),
      ...(entry && held && entry.expiresAt !== undefined
        ? { ttlRemainingMs: remainingMs(entry) }
        : {}),
      waiters: options.waiters(name),
    };
    for (const subscriber of subscribers) {
      if (!name.startsWith(subscriber.prefix)) continue;
      try {
        subscriber.listener(event);
      } catch {
        // One subscriber's failure must not starve the others.
      }
    }
  }

  function open(
    state: Omit<LockState, 'ttlRemainingMs'> & { ttlRemainingMs: number | undefined },
    local: boolean,
    type: 'acquired' | 'extended' | null,
  ): void {
    const entry: Entry = {
      name: state.name,
      owner: state.owner,
      token: state.token,
      expiresAt:
        state.ttlRemainingMs === undefined ? undefined : clock.now() + state.ttlRemainingMs,
      grantedAt: local && type === 'acquired' ? clock.now() : undefined,
      local,
      unwatch: () => {},
      watching: false,
    };
    entries.set(state.name, entry);
    touch(state.name);
    if (local) localHeld += 1;
    if (!local || subscribers.size > 0) watchBackend(entry);
    if (type) emit(type, state.name, entry, true);
  }

  /**
   * Follows `entry`'s name through core's watch. Leases granted elsewhere always need it; those
   * granted here only while someone watches a prefix (their release and loss are reported by
   * this server's lock service), so a grant costs no subscription when nobody looks.
   */
  function watchBackend(entry: Entry): void {
    if (entry.watching || closed) return;
    try {
      entry.unwatch = service.watch(entry.name, (change) => onChange(entry.name, change));
      entry.watching = true;
    } catch {
      // The service is shutting down: nothing more will change.
    }
  }

  function unwatchBackend(entry: Entry): void {
    if (!entry.watching) return;
    entry.watching = false;
    entry.unwatch();
    entry.unwatch = () => {};
  }

  function refresh(entry: Entry, ttlRemainingMs: number): void {
    entry.expiresAt = clock.now() + ttlRemainingMs;
    touch(entry.name);
  }

  function end(entry: Entry, type: HoldEnd): void {
    if (entries.get(entry.name) !== entry) return;
    entries.delete(entry.name);
    touch(entry.name);
    unwatchBackend(entry);
    if (entry.local) {
      localHeld -= 1;
      if (entry.grantedAt !== undefined)
        options.onHoldEnded?.(type, (clock.now() - entry.grantedAt) / 1000);
    }
    emit(type, entry.name, entry, false);
  }

  function onChange(name: string, change: LockChange): void {
    const entry = entries.get(name);
    if (!entry || closed) return;
    const { token } = change;
    if (!change.held) {
      // Core reports an end without a token only once it found the lock free.
      if (token === undefined || token === entry.token) {
        end(
          entry,
          change.type === 'acquired' || change.type === 'extended' ? 'expired' : change.type,
        );
      }
      return;
    }
    if (token === undefined || token < entry.token) return;
    if (token === entry.token) {
      // Extended elsewhere, or the lease left of a grant made elsewhere is known now.
      if (change.ttlRemainingMs === undefined) return;
      const before = entry.expiresAt;
      refresh(entry, change.ttlRemainingMs);
      if (before === undefined || Math.abs(entry.expiresAt! - before) > EXTENDED_BY_MS) {
        emit('extended', name, entry, true);
      }
      return;
    }
    // A newer lease exists, so ours ended without us seeing how.
    end(entry, 'expired');
    open(
      {
        name,
        owner: change.owner ?? '',
        token,
        ttlRemainingMs: change.ttlRemainingMs,
      },
      false,
      'acquired',
    );
  }

  function flushWaiters(): void {
    waitersFlush = undefined;
    for (const name of dirtyWaiters) {
      const count = options.waiters(name);
      if (count === (lastWaiters.get(name) ?? 0)) continue;
      if (count === 0) lastWaiters.delete(name);
      else lastWaiters.set(name, count);
      const entry = entries.get(name);
      emit('waiters', name, entry, entry !== undefined);
    }
    dirtyWaiters.clear();
  }

  return {
    granted(lease) {
      if (closed) return;
      const entry = entries.get(lease.name);
      if (entry && entry.token === lease.token) {
        // The same lease again: an idempotent re-acquire, or this server's own report of a
        // grant the backend already told the feed about.
        refresh(entry, lease.ttlMs);
        entry.owner = lease.owner;
        if (entry.local) emit('extended', lease.name, entry, true);
        else {
          entry.local = true;
          entry.grantedAt = clock.now();
          localHeld += 1;
        }
        return;
      }
      if (entry) {
        if (lease.token < entry.token) return;
        end(entry, 'expired');
      }
      open(
        { name: lease.name, owner: lease.owner, token: lease.token, ttlRemainingMs: lease.ttlMs },
        true,
        'acquired',
      );
    },

    extended(lease) {
      if (closed) return;
      const entry = entries.get(lease.name);
      if (entry && entry.token === lease.token) {
        refresh(entry, lease.ttlMs);
        if (!entry.local) {
          entry.local = true;
          localHeld += 1;
        }
        emit('extended', lease.name, entry, true);
        return;
      }
      if (entry) end(entry, 'expired');
      // A holder that reconnected here extends a lease granted elsewhere: it is ours now.
      open(
        { name: lease.name, owner: lease.owner, token: lease.token, ttlRemainingMs: lease.ttlMs },
        true,
        'extended',
      );
    },

    released(name, token) {
      const entry = entries.get(name);
      if (entry?.token === token) end(entry, 'released');
    },

    ended(name, token, reason) {
      const entry = entries.get(name);
      if (entry?.token === token) end(entry, reason);
    },

    waitersChanged(name) {
      if (closed) return;
      dirtyWaiters.add(name);
      waitersFlush ??= setImmediate(flushWaiters);
    },

    async seed(prefix) {
      if (!backend.list || closed) return;
      const touched = new Set<string>();
      readsInFlight.add(touched);
      let listed: LockState[];
      try {
        listed = await withDeadline(clock, options.backendTimeoutMs, 'list', () =>
          backend.list!(prefix),
        );
      } finally {
        readsInFlight.delete(touched);
      }
      if (closed) return;
      for (const state of listed) {
        if (entries.has(state.name) || touched.has(state.name)) continue;
        open(state, false, null);
      }
    },

    snapshot(prefix) {
      const locks: FeedLock[] = [];
      for (const entry of entries.values()) {
        if (!entry.name.startsWith(prefix)) continue;
        locks.push({
          name: entry.name,
          owner: entry.owner,
          token: entry.token,
          ttlRemainingMs: remainingMs(entry),
          waiters: options.waiters(entry.name),
        });
      }
      return locks.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },

    subscribe(prefix, listener) {
      const subscriber: Subscriber = { prefix, listener };
      if (subscribers.size === 0 && !closed) {
        for (const entry of entries.values()) watchBackend(entry);
      }
      subscribers.add(subscriber);
      return () => {
        if (!subscribers.delete(subscriber) || subscribers.size > 0) return;
        for (const entry of entries.values()) if (entry.local) unwatchBackend(entry);
      };
    },

    get localHeld() {
      return localHeld;
    },

    close() {
      closed = true;
      if (waitersFlush) clearImmediate(waitersFlush);
      for (const entry of entries.values()) unwatchBackend(entry);
      entries.clear();
      subscribers.clear();
      localHeld = 0;
    },
  };
}
