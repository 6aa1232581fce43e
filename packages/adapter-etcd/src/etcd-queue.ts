import { randomBytes } from 'node:crypto';
import { type AcquireRequest, type AcquireResult, DlmError, type Grant } from '@dlm/core';
import {
  type Etcd3,
  EtcdLeaseInvalidError,
  type ICompare,
  type IKeyValue,
  type ITxnResponse,
} from 'etcd3';
import { type Budget, budget, type RetryMode, withRetries } from './etcd-calls.js';
import { type EtcdKeys, prefixEnd } from './etcd-keys.js';
import type { LeasePool, LockLease } from './etcd-leases.js';
import type { WaiterSession } from './etcd-session.js';
import type { PrefixWatch } from './etcd-watch.js';

/** What the queue needs from the backend it belongs to. */
export interface QueueContext {
  client: Etcd3;
  keys: EtcdKeys;
  watch: PrefixWatch;
  session: WaiterSession;
  commandTimeoutMs: number;
  minTtlMs: number;
  isClosed(): boolean;
  leases: LeasePool;
  remainingOf(limit: Budget, kv: IKeyValue): Promise<number | undefined>;
  watchEstablished(limit: Budget): Promise<void>;
  txn(
    limit: Budget,
    mode: RetryMode,
    request: Parameters<Etcd3['kv']['txn']>[0],
  ): Promise<ITxnResponse>;
}

/** The outcome of one look at the queue: a grant, or what to sleep on until the next look. */
type Step =
  | { kind: 'granted'; grant: Grant }
  /** Look again at once (we just joined the queue, or our entry is gone). */
  | { kind: 'again' }
  /** Sleep until this key (our predecessor in the queue) is deleted. */
  | { kind: 'predecessor'; key: string }
  /** We are at the head: sleep until the lock is released or its lease runs out. */
  | { kind: 'lock'; ttlRemainingMs: number | undefined };

const free = (key: Buffer): ICompare => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: 0,
});

/**
 * The waiters' queue, as etcd's `concurrency.Mutex` builds it: each waiter puts a key
 * `<prefix>queue/<name>\0<id>` attached to the backend's waiter lease; create revisions order
 * the queue. A waiter sleeps on its predecessor's deletion only (a release wakes one waiter,
 * not all of them); at the head it sleeps on the lock key's deletion (release, revocation or
 * expiry, all seen by the prefix watch) with the holder's remaining lease as a fallback timer.
 *
 * Taking the lock from the head is one transaction guarded by three comparisons: our queue key
 * still exists with its create revision (our wait's lease did not run out meanwhile: the check
 * etcd's lock service lacked, etcd-io/etcd#11456), no older waiter is left, and the lock key is
 * free. It puts the lock key on a lease granted just before and deletes our queue key, so the
 * lease a grant reports was counted from that moment, not from when the wait began.
 *
 * A try-lock (`tryAcquire`) only takes a free lock when the queue is empty, so it never jumps
 * ahead of waiters, on this dlm server or any other.
 */
export function fairQueue(context: QueueContext) {
  const { keys, watch, commandTimeoutMs } = context;
  /** Wakes every sleeping waiter (on close, so that they notice). */
  const sleepers = new Set<() => void>();
  /** Per name, the last waiter of this server still joining the queue. */
  const joining = new Map<string, Promise<void>>();

  /**
   * Waiters of one server join a name's queue one after the other, in the order they called,
   * so that FIFO among them survives the varying time each one's requests take.
   */
  function takeTurn(name: string): { ready: Promise<void>; done: () => void } {
    const previous = joining.get(name) ?? Promise.resolve();
    let done: () => void = () => {};
    const finished = new Promise<void>((resolve) => {
      done = resolve;
    });
    const last = previous.then(() => finished);
    joining.set(name, last);
    void last.then(() => {
      if (joining.get(name) === last) joining.delete(name);
    });
    return { ready: previous, done };
  }

  /** Deletes a waiter key, retrying in the background when etcd does not answer now. */
  async function dequeue(key: Buffer): Promise<void> {
    const remove = (limit: Budget) =>
      withRetries(limit, 'idempotent', true, (deadline) =>
        context.client.kv.deleteRange({ key }, { deadline }),
      );
    try {
      await remove(budget('dequeue', commandTimeoutMs));
    } catch {
      // Until it is gone it blocks the queue behind it: keep trying while the backend runs (the
      // waiter lease ends it anyway once the server stops).
      let delayMs = 250;
      const retry = () => {
        if (context.isClosed()) return;
        remove(budget('dequeue', commandTimeoutMs)).catch(() => {
          delayMs = Math.min(delayMs * 2, 5_000);
          setTimeout(retry, delayMs).unref();
        });
      };
      setTimeout(retry, delayMs).unref();
    }
  }

  async function acquireQueued({
    name,
    owner,
    ttlMs,
    signal,
  }: AcquireRequest & { signal: AbortSignal }): Promise<AcquireResult> {
    if (signal.aborted) return { granted: false };
    if (context.isClosed())
      throw new DlmError('UNAVAILABLE', 'acquire: the etcd backend is closed');
    const turn = takeTurn(name);
    const lockKey = keys.lock(name);
    const queueStart = keys.queue(name);
    const queueEnd = prefixEnd(queueStart);
    const value = Buffer.from(owner);
    const leaseTtlMs = Math.max(ttlMs, context.minTtlMs);
    let myKey = Buffer.alloc(0);
    /** Our queue key's create revision while we are queued. */
    let myRevision: bigint | undefined;
    let sleepingOn: Step = { kind: 'again' };
    let inFlight = false;
    let missed = false;
    let wake: () => void = () => {};
    let ttlRemainingMs: number | undefined;
    let leaseRenewed = false;

    // Events that arrive while a look is in flight may be about what it read: look again.
    const notice = (relevant: boolean) => {
      if (inFlight) missed = true;
      else if (relevant) wake();
    };
    const stopLock = watch.subscribe(name, (event) => {
      if (event.type !== 'acquired') notice(sleepingOn.kind === 'lock');
    });
    const stopQueue = watch.subscribeQueue(name, (deletedKey) =>
      notice(
        deletedKey === undefined ||
          (sleepingOn.kind === 'predecessor' && deletedKey === sleepingOn.key) ||
          deletedKey === myKey.toString(),
      ),
    );

    const grantOf = (token: string, lease: LockLease): Grant => ({
      name,
      owner,
      token: BigInt(token),
      ttlMs: lease.ttlMs,
    });

    /** Not queued: take the free lock, refresh our own, or join the queue. */
    async function join(limit: Budget): Promise<Step> {
      const lease = await context.leases.take(limit, leaseTtlMs);
      const sessionLease = await context.session.leaseId(limit);
      myKey = Buffer.concat([queueStart, Buffer.from(randomBytes(8).toString('hex'))]);
      let response: ITxnResponse;
      try {
        // The same transaction as tryAcquire's, except that it joins the queue instead of
        // failing. Putting the same queue key twice keeps its create revision, so it may be
        // retried after a lost reply.
        response = await context.txn(limit, 'idempotent', {
          compare: [free(lockKey), { ...free(queueStart), range_end: queueEnd }],
          success: [{ request_put: { key: lockKey, value, lease: lease.id } }],
          failure: [
            {
              request_txn: {
                compare: [{ key: lockKey, target: 'Value', result: 'Equal', value }],
                success: [{ request_put: { key: lockKey, value, lease: lease.id, prev_kv: true } }],
                failure: [
                  { request_put: { key: myKey, value, lease: sessionLease } },
                  {
                    request_range: {
                      key: queueStart,
                      range_end: queueEnd,
                      sort_order: 'Descend',
                      sort_target: 'Create',
                      limit: 2,
                      keys_only: true,
                    },
                  },
                  { request_range: { key: lockKey } },
                ],
              },
            },
          ],
        });
      } catch (error) {
        if (error instanceof DlmError && error.cause instanceof EtcdLeaseInvalidError) {
          context.leases.detached(lease.id);
          // The waiter lease ran out (this server or etcd stalled for its TTL) before its
          // keepalive noticed: join again on a new one, once.
          if (leaseRenewed) throw error;
          leaseRenewed = true;
          context.session.invalidate(sessionLease);
          return { kind: 'again' };
        }
        if (!(error instanceof DlmError && error.details.indeterminate))
          context.leases.detached(lease.id);
        else void dequeue(myKey);
        throw error;
      }
      if (response.succeeded) return checked(grantOf(response.header.revision, lease), lease);
      const nested = response.responses[0]?.response_txn;
      if (nested?.succeeded) {
        const previous = nested.responses[0]?.response_put.prev_kv;
        if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
        if (previous.lease !== lease.id) context.leases.detached(previous.lease);
        return checked(grantOf(previous.create_revision, lease), lease);
      }
      context.leases.detached(lease.id);
      const newest = nested?.responses[1]?.response_range.kvs ?? [];
      const ours = newest[0];
      if (!ours?.key.equals(myKey)) {
        // A retried put: others joined in between, so the range does not show our neighbour.
        myRevision = ours ? await revisionOf(limit, myKey) : undefined;
        return { kind: 'again' };
      }
      myRevision = BigInt(ours.create_revision);
      const predecessor = newest[1];
      if (predecessor) return { kind: 'predecessor', key: predecessor.key.toString() };
      const holder = nested?.responses[2]?.response_range.kvs[0];
      return { kind: 'lock', ttlRemainingMs: holder && (await context.remainingOf(limit, holder)) };
    }

    async function revisionOf(limit: Budget, key: Buffer): Promise<bigint | undefined> {
      const response = await withRetries(limit, 'idempotent', false, (deadline) =>
        context.client.kv.range({ key }, { deadline }),
      );
      const kv = response.kvs[0];
      return kv ? BigInt(kv.create_revision) : undefined;
    }

    /** Queued: take the lock if we are at the head and it is free; else learn what to wait on. */
    async function takeFromHead(limit: Budget, revision: bigint): Promise<Step> {
      const lease = await context.leases.take(limit, leaseTtlMs);
      let response: ITxnResponse;
      try {
        response = await context.txn(limit, 'idempotent', {
          compare: [
            // Still queued: the wait's lease did not end while we slept (etcd-io/etcd#11456).
            { key: myKey, target: 'Create', result: 'Equal', create_revision: revision.toString() },
            // Nobody older waits: every key of the queue was created at or after ours.
            {
              key: queueStart,
              range_end: queueEnd,
              target: 'Create',
              result: 'Greater',
              create_revision: (revision - 1n).toString(),
            },
            free(lockKey),
          ],
          success: [
            { request_put: { key: lockKey, value, lease: lease.id } },
            { request_delete_range: { key: myKey } },
          ],
          failure: [
            { request_range: { key: myKey, keys_only: true } },
            {
              request_range: {
                key: queueStart,
                range_end: queueEnd,
                max_create_revision: (revision - 1n).toString(),
                sort_order: 'Descend',
                sort_target: 'Create',
                limit: 1,
                keys_only: true,
              },
            },
            { request_range: { key: lockKey } },
          ],
        });
      } catch (error) {
        if (!(error instanceof DlmError && error.details.indeterminate))
          context.leases.detached(lease.id);
        throw error;
      }
      if (response.succeeded) {
        myRevision = undefined;
        return checked(grantOf(response.header.revision, lease), lease);
      }
      context.leases.detached(lease.id);
      if (!response.responses[0]?.response_range.kvs.length) {
        // Our entry is gone (its lease ran out while etcd or this server stalled, or a retried
        // transaction had in fact taken the lock): start over; join() also finds a lock that
        // is already ours.
        myRevision = undefined;
        return { kind: 'again' };
      }
      const predecessor = response.responses[1]?.response_range.kvs[0];
      if (predecessor) return { kind: 'predecessor', key: predecessor.key.toString() };
      const holder = response.responses[2]?.response_range.kvs[0];
      if (!holder) return { kind: 'again' };
      return { kind: 'lock', ttlRemainingMs: await context.remainingOf(limit, holder) };
    }

    /** No grant is reported whose lease may already have run out (S5). */
    async function checked(grant: Grant, lease: LockLease): Promise<Step> {
      if (performance.now() - lease.sentAt < grant.ttlMs) return { kind: 'granted', grant };
      const limit = budget('release', commandTimeoutMs);
      const response = await context
        .txn(limit, 'once', {
          compare: [
            { key: lockKey, target: 'Create', result: 'Equal', create_revision: `${grant.token}` },
          ],
          success: [{ request_delete_range: { key: lockKey, prev_kv: true } }],
          failure: [],
        })
        .catch(() => undefined);
      // Only a lease this transaction took the key off is known to be free (it is running out).
      if (response?.succeeded) {
        context.leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
      }
      throw new DlmError('UNAVAILABLE', 'etcd answered after the lease had already run out', {
        indeterminate: true,
      });
    }

    async function look(): Promise<Step> {
      if (myRevision !== undefined) {
        const limit = budget('acquire', commandTimeoutMs);
        await context.watchEstablished(limit);
        return takeFromHead(limit, myRevision);
      }
      await turn.ready;
      const limit = budget('acquire', commandTimeoutMs);
      try {
        await context.watchEstablished(limit);
        return await join(limit);
      } finally {
        turn.done();
      }
    }

    const aborted = new Promise<void>((resolve) => {
      signal.addEventListener('abort', () => resolve(), { once: true });
    });

    try {
      for (;;) {
        if (signal.aborted) break;
        missed = false;
        inFlight = true;
        let step: Step;
        try {
          step = await look();
        } finally {
          inFlight = false;
        }
        // Granted as the wait ended: core hands the grant back, since nobody will use it.
        if (step.kind === 'granted') return { granted: true, grant: step.grant };
        sleepingOn = step;
        if (step.kind === 'lock') ttlRemainingMs = step.ttlRemainingMs;
        if (step.kind === 'again' || missed || signal.aborted) continue;
        await new Promise<void>((resolve) => {
          let timer: NodeJS.Timeout | undefined;
          const done = () => {
            clearTimeout(timer);
            sleepers.delete(done);
            wake = () => {};
            resolve();
          };
          wake = done;
          sleepers.add(done);
          // etcd reports expiries through the watch; the timer only covers a missed event.
          if (step.kind === 'lock' && step.ttlRemainingMs !== undefined) {
            timer = setTimeout(done, step.ttlRemainingMs + 250);
          }
          void aborted.then(done);
        });
        if (context.isClosed()) {
          throw new DlmError('UNAVAILABLE', 'acquire: the etcd backend is closed');
        }
      }
      return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
    } finally {
      turn.done();
      stopLock();
      stopQueue();
      if (myRevision !== undefined) await dequeue(myKey);
    }
  }

  return {
    acquireQueued,
    /** Wakes every sleeping waiter, which then finds the backend closed. */
    wakeAll(): void {
      for (const wakeUp of [...sleepers]) wakeUp();
    },
  };
}
