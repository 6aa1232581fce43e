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
import type { LeasePool, LockLease, ReservedLease } from './etcd-leases.js';
import type { WaiterSession } from './etcd-session.js';
import { holderValue } from './etcd-value.js';
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
  /** The remaining time of this lease (undefined when unknown). */
  remainingOfLease(limit: Budget, lease: string): Promise<number | undefined>;
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
    keyHash,
    signal,
  }: AcquireRequest & { signal: AbortSignal }): Promise<AcquireResult> {
    if (signal.aborted) return { granted: false };
    if (context.isClosed())
      throw new DlmError('UNAVAILABLE', 'acquire: the etcd backend is closed');
    const turn = takeTurn(name);
    const lockKey = keys.lock(name);
    const queueStart = keys.queue(name);
    const queueEnd = prefixEnd(queueStart);
    // The owner with the key hash (etcd-value.ts): a re-acquire must match both.
    const value = holderValue(owner, keyHash);
    const leaseTtlMs = Math.max(ttlMs, context.minTtlMs);
    let myKey = Buffer.alloc(0);
    /** Our queue key's create revision while we are queued. */
    let myRevision: bigint | undefined;
    let sleepingOn: Step = { kind: 'again' };
    let inFlight = false;
    /** What the watch reported while a look was in flight (it may be about what the look read). */
    const seen = { lockFreed: false, reset: false, deleted: new Set<string>() };
    let wake: () => void = () => {};
    let ttlRemainingMs: number | undefined;
    let leaseRenewed = false;
    /** A pooled lease turned out to be gone: take the next one only once etcd renewed it. */
    let confirmedLease = false;

    /** Whether `step` may be out of date because of an event seen while its look was in flight. */
    const missedFor = (step: Step): boolean =>
      seen.reset ||
      seen.deleted.has(myKey.toString()) ||
      (step.kind === 'lock' && seen.lockFreed) ||
      (step.kind === 'predecessor' && seen.deleted.has(step.key));
    /** The lock as the last event about it left it: granted at this revision, on this lease. */
    let lastGrant: { revision: string; lease: string | undefined } | undefined;
    /**
     * Our predecessor's key went in the revision that granted the lock (it was the head and
     * took the lock): we are at the head now, and the lock is held.
     */
    let promoted: string | undefined;
    const stopLock = watch.subscribe(name, (event, lease) => {
      if (event.type === 'acquired') {
        lastGrant = { revision: `${event.token}`, lease };
        return;
      }
      lastGrant = undefined;
      if (inFlight) seen.lockFreed = true;
      else if (sleepingOn.kind === 'lock') wake();
    });
    const stopQueue = watch.subscribeQueue(name, (deletedKey, revision) => {
      if (inFlight) {
        if (deletedKey === undefined) seen.reset = true;
        else seen.deleted.add(deletedKey);
      } else if (
        deletedKey === undefined ||
        (sleepingOn.kind === 'predecessor' && deletedKey === sleepingOn.key) ||
        deletedKey === myKey.toString()
      ) {
        promoted =
          sleepingOn.kind === 'predecessor' && deletedKey === sleepingOn.key ? revision : undefined;
        wake();
      }
    });

    const grantOf = (token: string, lease: LockLease): Grant => ({
      name,
      owner,
      token: BigInt(token),
      ttlMs: lease.ttlMs,
    });

    /** Not queued: take the free lock, refresh our own, or join the queue. */
    async function join(limit: Budget): Promise<Step> {
      // Under contention the lock is held and the lease not used: a pooled lease is renewed
      // only once the transaction took the lock (see `reported`).
      const early = confirmedLease ? undefined : context.leases.reserve(leaseTtlMs);
      const lease = early ?? (await context.leases.take(limit, leaseTtlMs));
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
        if (early && error instanceof DlmError && error.cause instanceof EtcdLeaseInvalidError) {
          // Most likely the pooled lease was gone (the waiter lease is tried next): the branch
          // that puts the lock key on it applied nothing. Join again on a confirmed lease.
          confirmedLease = true;
          void dequeue(myKey);
          return { kind: 'again' };
        }
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
      if (response.succeeded) return reported(limit, response.header.revision, lease, early);
      const nested = response.responses[0]?.response_txn;
      if (nested?.succeeded) {
        const previous = nested.responses[0]?.response_put.prev_kv;
        if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
        if (previous.lease !== lease.id) context.leases.detached(previous.lease);
        return reported(limit, previous.create_revision, lease, early);
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

    /**
     * Queued: take the lock if we are at the head and it is free; else learn what to wait on.
     *
     * This is the handoff path, so a pooled lease is not renewed before the transaction: when
     * the lock was seen free (we slept at the head), the renewal goes out with the transaction
     * (one round trip fewer between a release and the next grant); otherwise (we just moved up
     * the queue, and most likely find the lock held) only once the transaction took the lock.
     * The grant is reported only once etcd confirmed the renewal, counted from when it was
     * sent; a transaction refused because the lease is gone is tried again on a confirmed
     * lease, and a key put on a lease whose renewal was not confirmed moves to another lease
     * first.
     */
    async function takeFromHead(
      limit: Budget,
      revision: bigint,
      lockSeenFree: boolean,
    ): Promise<Step> {
      const early = confirmedLease ? undefined : context.leases.reserve(leaseTtlMs);
      const renewing = early && lockSeenFree ? early.renew(limit) : undefined;
      const lease = early ?? (await context.leases.take(limit, leaseTtlMs));
      /** Gives the lease back for reuse (once a renewal sent has settled). */
      const giveBack = () => {
        if (renewing) void renewing.then(() => context.leases.detached(lease.id));
        else context.leases.detached(lease.id);
      };
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
        if (early && error instanceof DlmError && error.cause instanceof EtcdLeaseInvalidError) {
          // The pooled lease was gone: nothing was applied (or, after a lost reply, what was
          // went with the lease). Look again on a lease whose renewal etcd confirmed first.
          confirmedLease = true;
          return { kind: 'again' };
        }
        if (!(error instanceof DlmError && error.details.indeterminate)) giveBack();
        throw error;
      }
      if (response.succeeded) {
        myRevision = undefined;
        return reported(limit, response.header.revision, lease, early);
      }
      giveBack();
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

    /**
     * We took the lock (`token`) on `lease`: report it once the lease is known to run its TTL
     * from a known moment. A pooled lease sent before its renewal was confirmed (`early`) is
     * renewed now if that was not sent yet, and the grant counts from when it was sent.
     */
    async function reported(
      limit: Budget,
      token: string,
      lease: LockLease | ReservedLease,
      early: ReservedLease | undefined,
    ): Promise<Step> {
      if (!early) return checked(grantOf(token, lease as LockLease), lease as LockLease);
      const renewed = await early.renew(limit);
      return renewed ? checked(grantOf(token, renewed), renewed) : moved(token, early.id);
    }

    /**
     * We took the lock on a pooled lease whose renewal etcd did not confirm: move the key to a
     * confirmed lease before reporting the grant. If the key is gone, it went with its lease
     * and the lock was never reported: queue again.
     */
    async function moved(token: string, unconfirmed: string): Promise<Step> {
      const limit = budget('acquire', commandTimeoutMs);
      const ours: ICompare = {
        key: lockKey,
        target: 'Create',
        result: 'Equal',
        create_revision: token,
      };
      let lease: LockLease | undefined;
      let response: ITxnResponse;
      try {
        lease = await context.leases.take(limit, leaseTtlMs);
        response = await context.txn(limit, 'idempotent', {
          compare: [ours],
          success: [{ request_put: { key: lockKey, value, lease: lease.id } }],
          failure: [],
        });
      } catch (error) {
        if (lease && !(error instanceof DlmError && error.details.indeterminate))
          context.leases.detached(lease.id);
        // Not reported, so nobody will release it: give it back if etcd answers.
        void context
          .txn(budget('release', commandTimeoutMs), 'once', {
            compare: [ours],
            success: [{ request_delete_range: { key: lockKey } }],
            failure: [],
          })
          .catch(() => undefined);
        throw error;
      }
      if (!response.succeeded) {
        context.leases.detached(lease.id);
        return { kind: 'again' };
      }
      // Nothing of ours is left on the unconfirmed lease (not known any more: revoked).
      context.leases.detached(unconfirmed);
      return checked(grantOf(token, lease), lease);
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
      const grant = lastGrant;
      const promotedAt = promoted;
      promoted = undefined;
      if (myRevision !== undefined && promotedAt !== undefined && grant?.revision === promotedAt) {
        // Our predecessor took the lock and no event since says it was freed: sleep on the
        // lock without asking etcd (a transaction) what the watch already told us. Only what
        // we sleep on depends on it; the grant's transaction checks everything again. A
        // release seen while we ask for the holder's remaining lease makes us look again.
        const limit = budget('acquire', commandTimeoutMs);
        const holder = grant.lease ? await context.remainingOfLease(limit, grant.lease) : undefined;
        return { kind: 'lock', ttlRemainingMs: holder };
      }
      if (myRevision !== undefined) {
        const limit = budget('acquire', commandTimeoutMs);
        await context.watchEstablished(limit);
        return takeFromHead(limit, myRevision, sleepingOn.kind === 'lock');
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
        seen.lockFreed = false;
        seen.reset = false;
        seen.deleted.clear();
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
        // Only an event about what this step sleeps on means looking again at once: the others
        // (keys behind ours, other waiters' grants) change nothing for it.
        if (step.kind === 'again' || missedFor(step) || signal.aborted) continue;
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
