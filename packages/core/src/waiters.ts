import type { AcquireRequest, Unsubscribe } from './backend.js';
import type { Timer } from './clock.js';
import type { BackendQueue, QueueChange, QueueDriver, QueueSleep } from './queue-driver.js';
import type { BackendPlace } from './queue-positions.js';
import { createSleeper, type Sleeper } from './sleeper.js';

/** One running wait: its driver, its sleep, and its turn to join. */
export interface Wait {
  readonly name: string;
  readonly shared: boolean;
  driver: QueueDriver | undefined;
  readonly sleeper: Sleeper;
  /** Resolves once the waits of this server that came before are done joining. */
  readonly ready: Promise<void>;
  /** Resolves once this wait is done joining (or over). */
  readonly joined: Promise<void>;
  doneJoining(): void;
  /** The holder's remaining lease as this wait last saw it. */
  ttlRemainingMs: number | undefined;
  /** Once it waits, with a listener: its place in the backend's queue (`QueueDriver.position`). */
  place: BackendPlace | undefined;
}

/**
 * The registry of this server's waiters over one queue, per name in arrival order: what gives
 * each wait its turn to join, opens the name's watch while anyone waits, says who waits
 * (`QueueWaits.drivers`), and applies the wake rules to every change reported. Also the renewal
 * of their entries, for a queue whose entries live only while renewed.
 */
export class Waiters {
  readonly byName = new Map<string, Wait[]>();
  private readonly watches = new Map<string, Unsubscribe>();

  constructor(private readonly queue: BackendQueue<never>) {}

  /** Adds a wait behind the others of its name (its turn comes after theirs). */
  register(request: AcquireRequest): Wait {
    const waits = this.byName.get(request.name) ?? [];
    const previous = waits.at(-1);
    let doneJoining: () => void = () => {};
    const joined = new Promise<void>((resolve) => {
      doneJoining = resolve;
    });
    const wait: Wait = {
      name: request.name,
      shared: request.mode === 'shared',
      driver: undefined,
      sleeper: createSleeper(this.queue),
      ready: previous ? previous.joined : Promise.resolve(),
      joined,
      doneJoining,
      ttlRemainingMs: undefined,
      place: undefined,
    };
    waits.push(wait);
    if (waits.length === 1) this.open(request.name, waits);
    return wait;
  }

  unregister(wait: Wait): void {
    const waits = this.byName.get(wait.name);
    const at = waits?.indexOf(wait) ?? -1;
    if (!waits || at < 0) return;
    waits.splice(at, 1);
    if (waits.length > 0) return;
    this.byName.delete(wait.name);
    this.watches.get(wait.name)?.();
    this.watches.delete(wait.name);
  }

  private open(name: string, waits: Wait[]): void {
    this.byName.set(name, waits);
    const unsubscribe = this.queue.watch?.(name, (change) => this.report(name, change));
    if (unsubscribe) this.watches.set(name, unsubscribe);
  }

  drivers(name: string): QueueDriver[] {
    return (this.byName.get(name) ?? []).flatMap((wait) => (wait.driver ? [wait.driver] : []));
  }

  /** The wake rules: each waiter of `name` hears `change` if it concerns what it sleeps on. */
  report(name: string, change: QueueChange): void {
    const waits = this.byName.get(name);
    if (!waits) return;
    // This server's oldest queued waiter also looks on a holder's end when entries live only
    // while renewed: if the entry it sleeps on belongs to a server that died, nobody else would
    // tell it before that entry's end. One look per server per end at most.
    const first = this.queue.renewal && waits.find((wait) => wait.driver?.entry() !== undefined);
    for (const wait of [...waits]) {
      const entry = wait.driver?.entry();
      wait.sleeper.changed(change, (step) => wakes(change, step, wait, entry, wait === first));
      // Places move only when entries leave (a holder is no longer in the queue).
      if (change.what !== 'holder-ended') wait.place?.read();
    }
  }

  wakeAll(): void {
    for (const waits of this.byName.values()) for (const wait of waits) wait.sleeper.wake();
  }

  /** This server's entries, per name in arrival order. */
  entries(): Map<string, string[]> {
    const byName = new Map<string, string[]>();
    for (const [name, waits] of this.byName) {
      const ids = waits.flatMap((wait) => wait.driver?.entry() ?? []);
      if (ids.length > 0) byName.set(name, ids);
    }
    return byName;
  }
}

/**
 * Whether `change` wakes `wait` from `step`: a holder's end wakes those on the holder (and this
 * server's first waiter of a renewed queue); an entry's departure wakes the waiter behind it,
 * the wait whose own entry it was, and shared waiters on the holders (the shared entries ahead
 * count against their limit); anything else wakes everyone.
 */
function wakes(
  change: QueueChange,
  step: QueueSleep,
  wait: Wait,
  entry: string | undefined,
  first: boolean,
): boolean {
  if (change.what === 'unknown') return true;
  if (change.what === 'holder-ended') {
    return step.kind === 'holder' || (first && step.kind === 'predecessor');
  }
  return (
    change.key === undefined ||
    change.key === entry ||
    (step.kind === 'predecessor' && step.key === change.key) ||
    (wait.shared && step.kind === 'holder')
  );
}

/** This server's entries renewed every third of their life, while there are any. */
export function renewer(queue: BackendQueue<never>, waiters: Waiters) {
  const { renewal, clock } = queue;
  let timer: Timer | undefined;
  let stopped = false;
  const renewAll = (byName: Map<string, string[]>) => renewal!.renew(byName).catch(() => undefined);
  const tick = () => {
    const byName = waiters.entries();
    if (byName.size === 0) {
      timer = undefined;
      return;
    }
    void renewAll(byName).finally(() => {
      timer = undefined;
      schedule();
    });
  };
  const schedule = (): void => {
    if (!renewal || timer || stopped || waiters.entries().size === 0) return;
    timer = clock.setTimer(tick, Math.max(1, Math.floor(renewal.waiterTtlMs / 3)));
  };
  return {
    schedule,
    now() {
      const byName = waiters.entries();
      if (renewal && !stopped && byName.size > 0) void renewAll(byName);
    },
    stop() {
      stopped = true;
      timer?.cancel();
    },
  };
}
