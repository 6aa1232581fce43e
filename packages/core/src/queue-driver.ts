import type { AcquireRequest, Grant, LockConflict, LockEvent, Unsubscribe } from './backend.js';
import type { Clock } from './clock.js';

/**
 * The queue driver: what a backend that orders waiters itself (`capabilities.fairQueue`) offers
 * core, as `LockBackend.queue`. Core runs the one wait loop over it (`wait-loop.ts`, the shape of
 * Apache Curator's `LockInternals` over its `LockInternalsDriver`); a driver holds only what is
 * the backend's own: how to join, look, and leave atomically in that store. What is the same for
 * every backend is the loop's: the deadline and the caller's abort, turn-taking among this
 * server's waiters, sleeping until something it waits on changes (the wake rules), the registry
 * of this server's waiters, renewing entries that live only while renewed, leaving with retries,
 * and never reporting a grant whose lease is already over (S5).
 *
 * The per-server FIFO of backends without a queue of their own is the simplest driver
 * (`local-queue.ts`): an in-process list per name whose look tries the backend at the head.
 */

/** What one join or look found: a grant, or what to sleep on until the next look. */
export type QueueStep =
  /**
   * Granted. `sentAt`: when (on the backend's `clock`) the write that granted it was sent, if
   * before this look began (a grant handed over by a release); the lease is counted from then.
   */
  | { kind: 'granted'; grant: Grant; sentAt?: number | undefined }
  /** Look again at once (just joined, my entry is gone, or something moved under the look). */
  | { kind: 'again' }
  /**
   * Sleep until the entry ahead of mine leaves (`key`: which one, for the wake rules). With
   * `endsInMs`, that entry stops counting then unless its server renews it: look again then.
   */
  | { kind: 'predecessor'; key?: string | undefined; endsInMs?: number | undefined }
  /** First in line: sleep until a holder goes, or at the latest until its lease is over. */
  | { kind: 'holder'; ttlRemainingMs?: number | undefined }
  /** The request cannot be granted as asked (see `AcquireResult`): the wait ends, refused. */
  | { kind: 'conflict'; conflict: LockConflict };

/** A step a waiter sleeps on. */
export type QueueSleep = Extract<QueueStep, { kind: 'predecessor' | 'holder' }>;

/**
 * A change in a name's queue, as the backend saw it. The loop wakes the waiters it concerns:
 * `holder-ended` wakes those sleeping on the holder; `entry-left` those sleeping on that entry
 * (and shared waiters sleeping on the holders: the shared entries ahead count against their
 * limit, so one that leaves makes room); `unknown` every waiter of the name.
 */
export interface QueueChange {
  what: 'holder-ended' | 'entry-left' | 'unknown';
  /** `entry-left`: the entry's key; undefined when the backend cannot say which. */
  key?: string | undefined;
  /** `entry-left`: it left with the lock, whose lease runs this long (when known). */
  grantedMs?: number | undefined;
  /** The backend's own mark of the change (etcd: its revision), for its driver's next look. */
  mark?: string | undefined;
}

/** How a driver tells the loop about what it watches for its own waiter (one-shot watches). */
export interface QueueWaiter {
  /** Something this waiter watches changed: it looks again (during a look: does not sleep). */
  changed(): void;
}

/** One waiter's side of a backend's queue, for one request. */
export interface QueueDriver {
  /** My entry's key in the backend's queue while I am queued; undefined when not queued. */
  entry(): string | undefined;
  /**
   * Not queued: create my entry (or take a free lock at once). Called for one waiter of this
   * server and name at a time, in the order they arrived, so FIFO among them survives the time
   * each one's requests take.
   */
  join(): Promise<QueueStep>;
  /**
   * Queued: when I may be granted, take the lock and leave the queue in the same atomic step;
   * else say what to sleep on (watching it where the backend's watch does not report it).
   * `predecessorLeft`: the change that woke me from sleeping on the entry ahead, if one did.
   */
  look(predecessorLeft?: QueueChange): Promise<QueueStep>;
  /** Stop watching: the wait is over. */
  stop(): void;
  /** Remove the entry `entry` (abort, deadline, error). The loop retries a failure later. */
  leave(entry: string): Promise<void>;
  /**
   * Queued: my entry's 1-based place in the backend's queue, across every dlm server sharing
   * it (the entries ahead of mine that still count, plus one), in one read; undefined when I am
   * not queued (or my entry no longer counts). Every driver of a queue with `count` has it.
   * The loop reads it when the wait starts and again on each change the queue's `watch`
   * reports for the name; a backend whose watch does not report every departure calls `moved`
   * (at most once per read) when its own notification says the place may have changed since
   * this read (ZooKeeper: a watch on the queue's children).
   */
  position?(moved: () => void): Promise<number | undefined>;
}

/** For a backend whose entries live only while their dlm server renews them (Redis, PostgreSQL). */
export interface QueueRenewal {
  /** How long an entry counts without renewal; the loop renews every third of it. */
  waiterTtlMs: number;
  /**
   * Renews this server's entries, per name in arrival order. A failure is ignored (the next
   * renewal follows; an entry not renewed in time ends, and its waiter joins again). The
   * backend must never bring back an entry that already ended: others may have passed it.
   */
  renew(byName: ReadonlyMap<string, readonly string[]>): Promise<unknown>;
}

/**
 * A backend's queue, as `LockBackend.queue` offers it to core: the driver factory and the
 * facts the loop needs about it.
 */
export interface BackendQueue<R extends AcquireRequest = AcquireRequest> {
  /** The loop's timers, and the clock `QueueStep.sentAt` is read on. */
  readonly clock: Clock;
  /** How long after the holder's remaining lease to look again (in case its end went unheard). */
  readonly expirySlackMs: number;
  /** How long after an entry ahead should have ended (`endsInMs`) to look again. */
  readonly aheadSlackMs?: number | undefined;
  /** When a look could not say how long the holder has left, look again after this (default: never). */
  readonly unknownHolderMs?: number | undefined;
  readonly renewal?: QueueRenewal | undefined;
  /** True once the backend is closed: waits end with UNAVAILABLE, none starts. */
  isClosed(): boolean;
  /** Called once, when core first runs a wait over this queue: how the backend reaches them. */
  attach?(waits: QueueWaits): void;
  /**
   * What changes `name`'s queue (releases, expiries, entries leaving), reported for as long as
   * this server has waiters for the name. Without it, drivers report through `QueueWaiter`.
   */
  watch?(name: string, report: (change: QueueChange) => void): Unsubscribe;
  /** A driver for one waiting request. */
  driver(request: R, waiter: QueueWaiter): QueueDriver;
  /**
   * How many requests wait in `name`'s queue now, on every dlm server sharing the backend (the
   * entries that still count), in one read. With it, a service counts and places its waiters in
   * the backend's queue (`waitersScope: "backend"`), so each of its drivers must have
   * `position`; without it, among its own (`"server"`).
   */
  count?(name: string): Promise<number>;
}

/** How a backend reaches the waits core runs over its queue (`BackendQueue.attach`). */
export interface QueueWaits {
  /** A change the backend learnt outside its watch (its own release): see `QueueChange`. */
  report(name: string, change: QueueChange): void;
  /** This server's waiters of `name`, in arrival order (their drivers). */
  drivers(name: string): readonly QueueDriver[];
  /** The backend's connection is new (watches or entries may be lost): renew now, look again. */
  resync(): void;
  /**
   * The backend is closing: every wait ends (UNAVAILABLE) and leaves the queue; resolves once
   * all have left. No renewal or retried leave runs after it.
   */
  close(): Promise<void>;
}

/**
 * The `QueueWaits` a backend keeps: every loop that runs waits over its queue attaches to it
 * (one per queue object; a wrapper of the queue makes another), and what the backend calls
 * reaches them all. Give its `attach` as `BackendQueue.attach`.
 *
 * @example
 * const waits = queueWaits();
 * const queue: BackendQueue = { ...facts, attach: waits.attach, driver };
 * // on close: await waits.close();
 */
export function queueWaits(): QueueWaits & { attach(waits: QueueWaits): void } {
  const attached = new Set<QueueWaits>();
  return {
    attach: (waits) => void attached.add(waits),
    report: (name, change) => {
      for (const waits of attached) waits.report(name, change);
    },
    drivers: (name) => [...attached].flatMap((waits) => waits.drivers(name)),
    resync: () => {
      for (const waits of attached) waits.resync();
    },
    close: async () => {
      await Promise.all([...attached].map((waits) => waits.close()));
    },
  };
}

/**
 * The `watch` of a queue whose backend reports lock events and departures from the queue each
 * on its own stream (Redis pub/sub, PostgreSQL NOTIFY): a holder's end wakes those on the
 * holder, a departure those behind it.
 */
export function queueWatch(
  locks: (name: string, listener: (event: LockEvent) => void) => Unsubscribe,
  departures: (name: string, left: (change: QueueChange) => void) => Unsubscribe,
): NonNullable<BackendQueue['watch']> {
  return (name, report) => {
    const stops = [
      locks(name, (event) => {
        if (event.type !== 'acquired') report({ what: 'holder-ended' });
      }),
      departures(name, report),
    ];
    return () => {
      for (const stop of stops) stop();
    };
  };
}
