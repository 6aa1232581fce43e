import { type BackendQueue, type Clock, queueWaits, systemClock } from '@dlm/core';
import type { Budget } from './etcd-calls.js';
import type { GrantLeaseContext } from './etcd-grant-lease.js';
import type { EtcdKeys } from './etcd-keys.js';
import { countQueued, watchQueue } from './etcd-queue-reads.js';
import type { WaiterSession } from './etcd-session.js';
import { EtcdWaiter } from './etcd-waiter.js';
import type { PrefixWatch } from './etcd-watch.js';

/** What the queue needs from the backend it belongs to. */
export interface QueueContext extends GrantLeaseContext {
  client: import('etcd3').Etcd3;
  keys: EtcdKeys;
  watch: PrefixWatch;
  session: WaiterSession;
  minTtlMs: number;
  isClosed(): boolean;
  /** The remaining time of this lease (undefined when unknown). */
  remainingOfLease(limit: Budget, lease: string): Promise<number | undefined>;
  watchEstablished(limit: Budget): Promise<void>;
  /** Timers and "now" (the leases' `sentAt` is read on the same clock). Default: the system's. */
  clock?: Clock;
}

/** The lock as the last event about it left it: granted at this revision, on this lease. */
export type LastGrant = Map<string, { revision: string; lease: string | undefined }>;

/**
 * etcd's queue, as etcd's `concurrency.Mutex` builds it: each waiter (etcd-waiter.ts) puts a key
 * `<prefix>queue/<name>\0<id>` attached to the backend's waiter lease; create revisions order
 * the queue. Core's wait loop runs over it: a waiter sleeps on the entry ahead (its deletion)
 * or on the holders (their ends, seen by the prefix watch, with the holder's remaining lease as
 * the fallback timer). Every join and look is one transaction for either mode
 * (etcd-queue-txn.ts), the grant rule is core's, and the lease a grant goes on has its own fast
 * path (etcd-grant-lease.ts). A try-lock (`tryAcquire`) only takes a free lock when the queue is
 * empty, so it never jumps ahead of waiters, on this dlm server or any other.
 */
export function etcdQueue(context: QueueContext) {
  const clock = context.clock ?? systemClock;
  const lastGrant: LastGrant = new Map();
  const waits = queueWaits();
  const queue: BackendQueue = {
    clock,
    // etcd reports expiries through the watch; the timer only covers a missed event.
    expirySlackMs: 250,
    isClosed: context.isClosed,
    attach: waits.attach,
    watch: (name, report) => watchQueue(context, lastGrant, name, report),
    driver: (request) => new EtcdWaiter(context, lastGrant, request),
    count: (name) => countQueued(context, context.keys.queue(name)),
  };
  return {
    queue,
    /**
     * This backend just sent a release of `name`'s lock: a waiter here asleep at the head
     * looks now instead of on the release's watch event, so its grant transaction follows the
     * release's within the same moment (etcd commits both in one round, the release first as
     * sent). Only when it looks changes: the grant's comparisons decide.
     */
    releasing(name: string): void {
      waits.report(name, { what: 'holder-ended' });
    },
    /** Every wait ends (the backend is closed) and leaves the queue. */
    close: () => waits.close(),
  };
}
