import type { QueueChange } from '@dlm/core';
import type { IRangeRequest } from 'etcd3';
import { budget, withRetries } from './etcd-calls.js';
import { prefixEnd } from './etcd-keys.js';
import type { LastGrant, QueueContext } from './etcd-queue.js';
import type { Place } from './etcd-queue-txn.js';

// What etcd's queue hears (the prefix watch's events about one name) and counts (its waiters,
// one waiter's place): reads beside the driver's transactions, never a grant.

/** `BackendQueue.watch`: the name's holders' ends, its entries leaving, its lock-delay's end. */
export function watchQueue(
  context: QueueContext,
  lastGrant: LastGrant,
  name: string,
  report: (change: QueueChange) => void,
): () => void {
  const stopLock = context.watch.subscribe(name, (event, lease) => {
    if (event.type === 'acquired') lastGrant.set(name, { revision: `${event.token}`, lease });
    else {
      lastGrant.delete(name);
      report({ what: 'holder-ended' });
    }
  });
  const stopQueue = context.watch.subscribeQueue(name, (key, revision) =>
    report({ what: 'entry-left', key, mark: revision }),
  );
  // The head in a lock-delay sleeps on its key as on a holder (etcd-delay.ts).
  const stopDelay = context.watch.subscribeDelayEnd(name, () => report({ what: 'holder-ended' }));
  return () => {
    stopLock();
    stopQueue();
    stopDelay();
    lastGrant.delete(name);
  };
}

/** A range over the queue keys under `start`, in one read. */
function rangeQueue(context: QueueContext, start: Buffer, options: Partial<IRangeRequest>) {
  return withRetries(budget('inspect', context.commandTimeoutMs), 'idempotent', false, (deadline) =>
    context.client.kv.range({ key: start, range_end: prefixEnd(start), ...options }, { deadline }),
  );
}

/** How many requests queue for a name (its queue keys under `start`). */
export async function countQueued(context: QueueContext, start: Buffer): Promise<number> {
  return Number((await rangeQueue(context, start, { count_only: true })).count);
}

/**
 * The queue keys created at or before mine: my place (create revisions order the queue). A
 * range's `count` ignores the revision filters, so the keys themselves are counted.
 */
export async function placeInQueue(
  context: QueueContext,
  start: Buffer,
  place: Place,
): Promise<number | undefined> {
  if (!place.queued || place.revision <= 0n) return undefined;
  const keys = await rangeQueue(context, start, {
    keys_only: true,
    max_create_revision: place.revision.toString(),
  });
  if (!keys.kvs.some((kv) => kv.key.equals(place.myKey))) return undefined;
  return keys.kvs.length;
}
