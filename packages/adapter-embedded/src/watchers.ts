import type { LockEvent, Unsubscribe } from '@dlm/core';

type Listener = (event: LockEvent) => void;

/**
 * Watch subscriptions and the delivery of lock events.
 *
 * Events are queued by the backend after it changed its state and delivered by `drain()` at the
 * end of the operation, so a listener that reacts with `tryAcquire` sees the new state. A
 * listener may itself cause events (by acquiring in reaction to a release): those are appended
 * to the queue and delivered after the current one, never nested inside it, so every listener
 * sees events in the order the state changed.
 */
export interface Watchers {
  watch(name: string, listener: Listener): Unsubscribe;
  /** Whether anyone watches `name`: lets the backend skip building events nobody reads. */
  has(name: string): boolean;
  enqueue(event: LockEvent): void;
  drain(): void;
  clear(): void;
}

export function createWatchers(log: (line: string) => void): Watchers {
  const byName = new Map<string, Set<Listener>>();
  const queue: LockEvent[] = [];
  let draining = false;

  const deliver = (event: LockEvent) => {
    const listeners = byName.get(event.name);
    if (listeners === undefined) return;
    // A snapshot, so listeners added during this dispatch wait for the next event; the
    // `has` check skips listeners removed during it.
    for (const listener of [...listeners]) {
      if (!listeners.has(listener)) continue;
      try {
        listener(event);
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        log(`[dlm embedded] a watch listener for ${JSON.stringify(event.name)} threw: ${reason}`);
      }
    }
  };

  return {
    watch(name, listener) {
      let listeners = byName.get(name);
      if (listeners === undefined) {
        listeners = new Set();
        byName.set(name, listeners);
      }
      // Wrapped, so the same function watched twice is two subscriptions.
      const entry: Listener = (event) => listener(event);
      listeners.add(entry);
      return () => {
        const current = byName.get(name);
        if (current === undefined || !current.delete(entry)) return;
        if (current.size === 0) byName.delete(name);
      };
    },
    has: (name) => byName.has(name),
    enqueue(event) {
      queue.push(event);
    },
    drain() {
      if (draining) return;
      draining = true;
      try {
        for (let i = 0; i < queue.length; i++) deliver(queue[i]!);
      } finally {
        queue.length = 0;
        draining = false;
      }
    },
    clear() {
      byName.clear();
      queue.length = 0;
    },
  };
}
