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

/**
 * A name's subscriptions: the one most names have (the lock service's own watch of a name it
 * holds), or a Set once there are more. A Set for every held name was 150 bytes each.
 */
type Subscribers = Listener | Set<Listener>;

/** Tells one listener; a listener's failure is logged, never passed on. */
function tell(listener: Listener, event: LockEvent, log: (line: string) => void): void {
  try {
    listener(event);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    log(`[dlm embedded] a watch listener for ${JSON.stringify(event.name)} threw: ${reason}`);
  }
}

function unsubscribe(byName: Map<string, Subscribers>, name: string, entry: Listener): void {
  const current = byName.get(name);
  if (current === entry) byName.delete(name);
  else if (current instanceof Set && current.delete(entry) && current.size === 0) {
    byName.delete(name);
  }
}

export function createWatchers(log: (line: string) => void): Watchers {
  const byName = new Map<string, Subscribers>();
  const queue: LockEvent[] = [];
  let draining = false;

  const deliver = (event: LockEvent) => {
    const listeners = byName.get(event.name);
    if (listeners === undefined) return;
    if (!(listeners instanceof Set)) {
      tell(listeners, event, log);
      return;
    }
    // A snapshot, so listeners added during this dispatch wait for the next event; the
    // `has` check skips listeners removed during it.
    for (const listener of [...listeners]) {
      if (listeners.has(listener)) tell(listener, event, log);
    }
  };

  return {
    watch(name, listener) {
      const current = byName.get(name);
      // A function already watching the name is wrapped, so that watching twice is two
      // subscriptions; only then, since a wrapper per watch was 56 bytes per held name more.
      const repeated = current === listener || (current instanceof Set && current.has(listener));
      const entry: Listener = repeated ? (event) => listener(event) : listener;
      if (current === undefined) byName.set(name, entry);
      else if (current instanceof Set) current.add(entry);
      else byName.set(name, new Set([current, entry]));
      return () => unsubscribe(byName, name, entry);
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
