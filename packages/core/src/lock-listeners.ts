import type { LockEvent, Unsubscribe } from './backend.js';

/**
 * The watcher side of a backend's `watch(name, onChange)`, written once for every adapter that
 * multiplexes one event stream over many names (Redis pub/sub, PostgreSQL `LISTEN`): a map of
 * per-name entries, each with its listeners and whatever the adapter remembers about the name.
 */

export type LockListener = (event: LockEvent) => void;

/** Calls every listener with `event`, in subscription order. */
export function deliverEvent(listeners: Iterable<LockListener>, event: LockEvent): void {
  // A copy: a listener may unsubscribe (itself or another) while being told.
  for (const listener of [...listeners]) {
    try {
      listener(event);
    } catch {
      // One listener's failure must not starve the others.
    }
  }
}

/** One watched name. Adapters extend it with what they track per name. */
export interface ListenerEntry {
  readonly name: string;
  readonly listeners: Set<LockListener>;
}

export interface LockListenersHooks<E extends ListenerEntry> {
  /** A name's first watcher arrived: the entry to keep for it (with an empty `listeners`). */
  create(name: string): E;
  /** A name's last watcher left: its entry is no longer in the map (cancel its timers). */
  dropped?(entry: E): void;
}

/**
 * Per-name listener entries. An entry lives while its name has a watcher; once it is dropped,
 * `isCurrent` tells late work (a read, a timer) about it that its news is for nobody.
 */
export class LockListeners<E extends ListenerEntry> {
  private readonly byName = new Map<string, E>();

  constructor(private readonly hooks: LockListenersHooks<E>) {}

  /** Subscribes `listener` to `name`'s events. */
  watch(name: string, listener: LockListener): Unsubscribe {
    let entry = this.byName.get(name);
    if (!entry) {
      entry = this.hooks.create(name);
      this.byName.set(name, entry);
    }
    const own = entry;
    // A wrapper per call, so the same function watched twice is two subscriptions.
    const wrapped: LockListener = (event) => listener(event);
    own.listeners.add(wrapped);
    return () => {
      own.listeners.delete(wrapped);
      if (own.listeners.size === 0 && this.byName.get(name) === own) {
        this.byName.delete(name);
        this.hooks.dropped?.(own);
      }
    };
  }

  /** The entry of a watched name. */
  get(name: string): E | undefined {
    return this.byName.get(name);
  }

  /** `entry` is still the one its name is watched through (not dropped, not replaced). */
  isCurrent(entry: E): boolean {
    return this.byName.get(entry.name) === entry;
  }

  /** Tells `name`'s watchers (if any) of `event`. */
  deliver(name: string, event: LockEvent): void {
    const entry = this.byName.get(name);
    if (entry) deliverEvent(entry.listeners, event);
  }

  entries(): IterableIterator<E> {
    return this.byName.values();
  }

  /** Names with at least one watcher. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  /** Forgets every entry, without calling `dropped` (the owner is closing). */
  clear(): void {
    this.byName.clear();
  }
}

/** A lease as its watchers heard of it (the owner when the news carried it). */
export interface HeardHolder {
  token: bigint;
  owner?: string;
}

/**
 * What the watchers of `name` must be told when what they last heard (`before`) is compared
 * with the holder the store reports now (`now`): nothing when it is the same lease (extended at
 * most); else the old lease's expiry and the new grant. With `wakeWhenFree`, a name that was
 * and is free still gets a `released`: events may have been missed meanwhile (the stream was
 * down), and a waiter then looks again for itself.
 */
export function holderChangeEvents(
  name: string,
  before: HeardHolder | undefined,
  now: { token: bigint; owner: string } | undefined,
  wakeWhenFree: boolean,
): LockEvent[] {
  if (before && now && before.token === now.token) return [];
  const events: LockEvent[] = [];
  if (before) {
    events.push(
      before.owner === undefined
        ? { name, type: 'expired', token: before.token }
        : { name, type: 'expired', token: before.token, owner: before.owner },
    );
  }
  if (now) events.push({ name, type: 'acquired', token: now.token, owner: now.owner });
  else if (!before && wakeWhenFree) events.push({ name, type: 'released' });
  return events;
}
