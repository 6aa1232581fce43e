import type { FeedEvent } from './lock-feed.js';

/** Who listens to the feed, by prefix. */
export interface FeedSubscribers {
  readonly size: number;
  /** Calls `listener` for every event under `prefix` until the returned function is called. */
  add(prefix: string, listener: (event: FeedEvent) => void): () => boolean;
  /** Gives `event` to every subscriber whose prefix it falls under. */
  emit(event: FeedEvent): void;
  clear(): void;
}

export function createFeedSubscribers(): FeedSubscribers {
  const subscribers = new Set<{ prefix: string; listener: (event: FeedEvent) => void }>();
  return {
    get size() {
      return subscribers.size;
    },
    add(prefix, listener) {
      const subscriber = { prefix, listener };
      subscribers.add(subscriber);
      return () => subscribers.delete(subscriber);
    },
    emit(event) {
      for (const subscriber of subscribers) {
        if (!event.name.startsWith(subscriber.prefix)) continue;
        try {
          subscriber.listener(event);
        } catch {
          // One subscriber's failure must not starve the others.
        }
      }
    },
    clear() {
      subscribers.clear();
    },
  };
}

/**
 * Coalesces "the waiters of `name` may have changed" into one check per name per turn, and calls
 * `changed` only for the names whose count really moved.
 */
export function createWaitersBatch(
  waiters: (name: string) => number,
  changed: (name: string) => void,
): { touch(name: string): void; close(): void } {
  const dirty = new Set<string>();
  const last = new Map<string, number>();
  let flush: NodeJS.Immediate | undefined;

  function run(): void {
    flush = undefined;
    for (const name of dirty) {
      const count = waiters(name);
      if (count === (last.get(name) ?? 0)) continue;
      if (count === 0) last.delete(name);
      else last.set(name, count);
      changed(name);
    }
    dirty.clear();
  }

  return {
    touch(name) {
      dirty.add(name);
      flush ??= setImmediate(run);
    },
    close() {
      if (flush) clearImmediate(flush);
      flush = undefined;
    },
  };
}
