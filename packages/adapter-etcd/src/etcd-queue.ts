import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type Clock,
  createFairQueue,
  DlmError,
  type FairQueueDriver,
  type Grant,
  getOrCreate,
  type QueueStep,
  type QueueWatcher,
  systemClock,
  type Timer,
} from '@dlm/core';
import {
  type Etcd3,
  EtcdLeaseInvalidError,
  type ICompare,
  type IKeyValue,
  type IRequestOp,
  type ITxnResponse,
} from 'etcd3';
import { type Budget, budget, type RetryMode, withRetries } from './etcd-calls.js';
import { type EtcdKeys, prefixEnd } from './etcd-keys.js';
import type { LeasePool, LockLease, ReservedLease } from './etcd-leases.js';
import type { WaiterSession } from './etcd-session.js';
import {
  decideShared,
  noSharedHolder,
  oldestSharedHolder,
  type SharedRequest,
  sharedGrantCompares,
  sharedReads,
  sharedRefreshCompares,
  sharedView,
} from './etcd-shared.js';
import { holderValue, sharedValue } from './etcd-value.js';
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
  /** Timers and "now" (the leases' `sentAt` is read on the same clock). Default: the system's. */
  clock?: Clock;
}

const free = (key: Buffer): ICompare => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: 0,
});

const createdAt = (key: Buffer, revision: string): ICompare => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: revision,
});

/** A shared waiter's queue key: its id starts with `s` (an exclusive one's is hex digits). */
/**
 * The limit of a shared waiter's queue key (its id is `s<limit>.<random>`), or undefined for an
 * exclusive waiter's (hex digits).
 */
export function limitOfEntry(key: string): number | undefined {
  const start = key.lastIndexOf('\0') + 1;
  if (key[start] !== 's') return undefined;
  return Number(key.slice(start + 1, key.indexOf('.', start)));
}

const leaseInvalid = (error: unknown): boolean =>
  error instanceof DlmError && error.cause instanceof EtcdLeaseInvalidError;

const indeterminate = (error: unknown): boolean =>
  error instanceof DlmError && Boolean(error.details.indeterminate);

/**
 * The waiters' queue, as etcd's `concurrency.Mutex` builds it: each waiter puts a key
 * `<prefix>queue/<name>\0<id>` attached to the backend's waiter lease; create revisions order
 * the queue. A waiter sleeps on its predecessor's deletion only (a release wakes one waiter,
 * not all of them); at the head it sleeps on the lock key's deletion (release, revocation or
 * expiry, all seen by the prefix watch) with the holder's remaining lease as a fallback timer.
 * The wait loop is core's (`createFairQueue`); this file is etcd's driver for it.
 *
 * Taking the lock from the head is one transaction guarded by three comparisons: our queue key
 * still exists with its create revision (our wait's lease did not run out meanwhile: the check
 * etcd's lock service lacked, etcd-io/etcd#11456), no older waiter is left, and the lock key is
 * free. It puts the lock key on a lease granted just before and deletes our queue key, so the
 * lease a grant reports was counted from that moment, not from when the wait began.
 *
 * A try-lock (`tryAcquire`) only takes a free lock when the queue is empty, so it never jumps
 * ahead of waiters, on this dlm server or any other.
 *
 * Modes share the one queue (a shared waiter's key id is `s<limit>.<random>`). An exclusive
 * waiter is as above, except that "free" also means no shared holder key (one more comparison).
 * A shared waiter may be granted when no exclusive entry (nor a shared one with another limit)
 * is ahead of it, no exclusive holder holds the name, and the holders plus the shared entries
 * ahead of it are fewer than its limit (Curator's `getsTheLock` with `maxLeases`): it reads the
 * name and its part of the queue at one revision, decides, and grants in a transaction guarded
 * by the lock key and its own queue key (why that is enough: `sharedStep`). It sleeps on the
 * nearest blocker: the last such entry ahead of it (that entry's deletion), else the holders
 * (any holder's end, and any queue entry's deletion, which may leave room). So S,S,X,S: both S are granted together, X waits at the head
 * for both to end, and the last S waits for X's entry and then for X.
 */
export function fairQueue(context: QueueContext) {
  const clock = context.clock ?? systemClock;
  const dequeuer = createDequeuer(context, clock);
  const waitersByName = new Map<string, Set<EtcdWaiter>>();
  const queue = createFairQueue({
    clock,
    backend: 'etcd',
    isClosed: context.isClosed,
    // etcd reports expiries through the watch; the timer only covers a missed event.
    expirySlackMs: 250,
    driver: (request, watcher) =>
      new EtcdWaiter(context, clock, dequeuer, waitersByName, request, watcher),
  });
  return {
    acquireQueued: queue.acquireQueued,
    /**
     * This backend just sent a release of `name`'s lock: a waiter here asleep at the head of
     * its queue looks now instead of on the release's watch event, so its grant transaction
     * follows the release's within the same moment (etcd commits both in one round, the
     * release first as sent) rather than one round trip later. Only when it looks changes:
     * the grant's comparisons decide, and a grant that got there first fails and looks again
     * on the event, as before.
     */
    releasing(name: string): void {
      for (const waiter of waitersByName.get(name) ?? []) waiter.lockReleasing();
    },
    /**
     * On close: wakes every sleeping waiter, which then finds the backend closed, and drops the
     * pending dequeue retries (they would find it closed too; their timers need not keep the
     * process alive).
     */
    wakeAll(): void {
      dequeuer.close();
      queue.wakeAll();
    },
  };
}

interface Dequeuer {
  /** Deletes a waiter key, retrying in the background when etcd does not answer now. */
  dequeue(key: Buffer): Promise<void>;
  close(): void;
}

function createDequeuer(context: QueueContext, clock: Clock): Dequeuer {
  const retries = new Set<Timer>();
  const remove = (key: Buffer) =>
    withRetries(budget('dequeue', context.commandTimeoutMs), 'idempotent', true, (deadline) =>
      context.client.kv.deleteRange({ key }, { deadline }),
    );
  /** Until it is gone it blocks the queue behind it: keep trying while the backend runs. */
  function retryLater(key: Buffer, delayMs: number): void {
    const timer = clock.setTimer(() => {
      retries.delete(timer);
      if (context.isClosed()) return;
      remove(key).catch(() => retryLater(key, Math.min(delayMs * 2, 5_000)));
    }, delayMs);
    retries.add(timer);
  }
  return {
    async dequeue(key) {
      try {
        await remove(key);
      } catch {
        // The waiter lease ends it anyway once the server stops.
        retryLater(key, 250);
      }
    },
    close() {
      for (const timer of retries) timer.cancel();
      retries.clear();
    },
  };
}

/** One queued acquire: its queue key, and what the watch told it. */
class EtcdWaiter implements FairQueueDriver {
  private readonly lockKey: Buffer;
  private readonly queueStart: Buffer;
  private readonly queueEnd: Buffer;
  /** The owner with the key hash (etcd-value.ts): a re-acquire must match both. */
  private readonly value: Buffer;
  private readonly leaseTtlMs: number;
  /** A shared request: its holder key and value (etcd-shared.ts). */
  private readonly shared: SharedRequest | undefined;
  private readonly holderKey: Buffer;
  private myKey = Buffer.alloc(0);
  /** Our queue key's create revision while we are queued. */
  private myRevision: bigint | undefined;
  /** The last step this waiter was given (other than a grant). */
  private previous: QueueStep = { kind: 'again' };
  private leaseRenewed = false;
  /** A pooled lease turned out to be gone: take the next one only once etcd renewed it. */
  private confirmedLease = false;
  /** The lock as the last event about it left it: granted at this revision, on this lease. */
  private lastGrant: { revision: string; lease: string | undefined } | undefined;
  /**
   * Our predecessor's key went in the revision that granted the lock (it was the head and
   * took the lock): we are at the head now, and the lock is held.
   */
  private promoted: string | undefined;
  private readonly unsubscribe: (() => void)[];

  constructor(
    private readonly context: QueueContext,
    private readonly clock: Clock,
    private readonly dequeuer: Dequeuer,
    private readonly waitersByName: Map<string, Set<EtcdWaiter>>,
    private readonly request: AcquireRequest,
    private readonly watcher: QueueWatcher,
  ) {
    getOrCreate(waitersByName, request.name, () => new Set<EtcdWaiter>()).add(this);
    const { keys, watch } = context;
    this.lockKey = keys.lock(request.name);
    this.queueStart = keys.queue(request.name);
    this.queueEnd = prefixEnd(this.queueStart);
    this.value = holderValue(request.owner, request.keyHash);
    this.leaseTtlMs = Math.max(request.ttlMs, context.minTtlMs);
    this.shared =
      request.mode === 'shared'
        ? {
            name: request.name,
            owner: request.owner,
            keyHash: request.keyHash,
            limit: request.limit ?? 1,
          }
        : undefined;
    this.holderKey = keys.sharedHolder(request.name, request.owner, request.keyHash);
    const stopLock = watch.subscribe(request.name, (event, lease) => {
      if (event.type === 'acquired') {
        this.lastGrant = { revision: `${event.token}`, lease };
        return;
      }
      this.lastGrant = undefined;
      watcher.changed((step) => step.kind === 'holder');
    });
    const stopQueue = watch.subscribeQueue(request.name, (deletedKey, revision) => {
      // Only an event about what a step sleeps on matters to it: the others (keys behind ours,
      // other waiters' grants) change nothing for it.
      const woken = watcher.changed(
        (step) =>
          deletedKey === undefined ||
          deletedKey === this.myKey.toString() ||
          (step.kind === 'predecessor' && deletedKey === step.key) ||
          // A shared waiter asleep on the holders: an entry that left may have left room.
          (this.shared !== undefined && step.kind === 'holder'),
      );
      if (woken) {
        this.promoted =
          woken.kind === 'predecessor' && deletedKey === woken.key ? revision : undefined;
      }
    });
    this.unsubscribe = [stopLock, stopQueue];
  }

  queued(): boolean {
    return this.myRevision !== undefined;
  }

  stop(): void {
    for (const stop of this.unsubscribe) stop();
    const { name } = this.request;
    const waiters = this.waitersByName.get(name);
    waiters?.delete(this);
    if (waiters?.size === 0) this.waitersByName.delete(name);
  }

  /** See the queue's `releasing`: wake only from sleeping on the lock (at the head). */
  lockReleasing(): void {
    this.watcher.changed((step) => step.kind === 'holder');
  }

  leave(): Promise<void> {
    return this.dequeuer.dequeue(this.myKey);
  }

  join(): Promise<QueueStep> {
    this.promoted = undefined;
    return this.remember(async () => {
      const limit = budget('acquire', this.context.commandTimeoutMs);
      await this.context.watchEstablished(limit);
      return this.shared ? this.joinShared(limit, this.shared) : this.joinOrTake(limit);
    });
  }

  look(): Promise<QueueStep> {
    return this.remember(() => {
      const grant = this.lastGrant;
      const promotedAt = this.promoted;
      this.promoted = undefined;
      const limit = budget('acquire', this.context.commandTimeoutMs);
      if (this.shared) {
        const shared = this.shared;
        return this.context
          .watchEstablished(limit)
          .then(async () => (await this.sharedStep(limit, shared)) ?? { kind: 'again' });
      }
      if (promotedAt !== undefined && grant?.revision === promotedAt) {
        return this.sleepOnKnownHolder(limit, grant.lease);
      }
      return this.context
        .watchEstablished(limit)
        .then(() => this.takeFromHead(limit, this.myRevision!, this.previous.kind === 'holder'));
    });
  }

  /**
   * Not queued, shared: granted at once (or refreshed, or refused) as a shared try-lock would
   * be; else put our queue key and look (the look reads the entries ahead of it).
   */
  private async joinShared(limit: Budget, shared: SharedRequest): Promise<QueueStep> {
    const { context } = this;
    const step = await this.sharedStep(limit, shared);
    if (step) return step;
    const sessionLease = await context.session.leaseId(limit);
    this.myKey = Buffer.concat([
      this.queueStart,
      Buffer.from(`s${shared.limit}.${randomBytes(8).toString('hex')}`),
    ]);
    let response: ITxnResponse;
    try {
      // A put keeps the key's create revision, so a retry after a lost reply is harmless.
      response = await context.txn(limit, 'idempotent', {
        compare: [],
        success: [
          {
            request_put: {
              key: this.myKey,
              value: this.value,
              lease: sessionLease,
              prev_kv: true,
            },
          },
        ],
        failure: [],
      });
    } catch (error) {
      if (leaseInvalid(error) && !this.leaseRenewed) {
        this.leaseRenewed = true;
        context.session.invalidate(sessionLease);
        return { kind: 'again' };
      }
      if (indeterminate(error)) void this.dequeuer.dequeue(this.myKey);
      throw error;
    }
    const previous = response.responses[0]?.response_put.prev_kv;
    this.myRevision = BigInt(previous ? previous.create_revision : response.header.revision);
    return { kind: 'again' };
  }

  /**
   * One shared look: read the name (and, when queued, our key and the entries ahead of it) at
   * one revision, decide (etcd-shared.ts), and grant or refresh in a transaction guarded so the
   * decision still holds. Not queued, undefined means "join the queue".
   */
  private async sharedStep(limit: Budget, shared: SharedRequest): Promise<QueueStep | undefined> {
    const { context, queueStart, queueEnd, myKey } = this;
    const revision = this.myRevision;
    const queueReads: IRequestOp[] =
      revision === undefined
        ? [{ request_range: { key: queueStart, range_end: queueEnd, count_only: true } }]
        : [
            { request_range: { key: myKey, keys_only: true } },
            this.entriesAhead(revision, 'Ascend'),
          ];
    const read = await withRetries(limit, 'idempotent', false, (deadline) =>
      context.client.kv.txn(
        {
          compare: [],
          success: [...sharedReads(context.keys, shared), ...queueReads],
          failure: [],
        },
        { deadline },
      ),
    );
    const view = sharedView(read.responses, 0, read.header.revision);
    let sharedAhead = 0;
    /** The last entry ahead that must go first: exclusive, or shared with another limit. */
    let lastExclusive: string | undefined;
    if (revision === undefined) {
      if (Number(read.responses[3]?.response_range.count ?? 0) > 0) sharedAhead = -1;
    } else {
      if (!read.responses[3]?.response_range.kvs.length) {
        // Our entry is gone (its lease ran out while etcd or this server stalled): start over.
        this.myRevision = undefined;
        return { kind: 'again' };
      }
      for (const kv of read.responses[4]?.response_range.kvs ?? []) {
        const key = kv.key.toString();
        if (limitOfEntry(key) === shared.limit) sharedAhead += 1;
        else lastExclusive = key;
      }
    }
    const decision = decideShared(view, shared, Math.max(sharedAhead, 0));
    if (decision.kind === 'conflict') return decision;
    if (decision.kind !== 'refresh') {
      // Not queued, with anyone queued: join behind them (a try-lock never jumps the queue).
      if (revision === undefined && (sharedAhead < 0 || decision.kind === 'blocked')) {
        return undefined;
      }
      if (lastExclusive !== undefined) return { kind: 'predecessor', key: lastExclusive };
      if (decision.kind === 'blocked') {
        const by = decision.by;
        return {
          kind: 'holder',
          ttlRemainingMs: by ? await context.remainingOfLease(limit, by.lease) : undefined,
        };
      }
    }
    const lease = await context.leases.take(limit, this.leaseTtlMs);
    // A refresh is the holder's own (it never waits). Not queued, a grant is a try-lock's:
    // nobody queued, and the holders unchanged since the read (etcd-shared.ts).
    //
    // Queued, a grant needs only the lock key free and our own entry still there: no compare
    // on the holders, so that shared waiters woken together are granted together instead of
    // failing each other's compares. Why the limit still holds: take the holder whose position
    // is latest (a waiter's is its entry's create revision; a try-lock's, the revision of its
    // read, and it commits only if no entry joined since and no holder changed). Every other
    // holder was ahead of it, so when it read, each was already a holder or an entry ahead of
    // it with its limit (an entry with another limit ahead makes it wait, above; a grant turns
    // an entry into a holder in one transaction; a try-lock ahead of its entry committed before
    // the entry was created, or not at all). It counted them all and found fewer than the limit.
    const compare: ICompare[] =
      decision.kind === 'refresh'
        ? sharedRefreshCompares(decision.kv)
        : revision === undefined
          ? [
              ...sharedGrantCompares(context.keys, shared.name, view),
              { ...free(queueStart), range_end: queueEnd },
            ]
          : [free(this.lockKey), createdAt(myKey, revision.toString())];
    let response: ITxnResponse;
    try {
      response = await context.txn(limit, 'idempotent', {
        compare,
        success: [
          {
            request_put: {
              key: this.holderKey,
              value: sharedValue(shared.limit, shared.owner),
              lease: lease.id,
              prev_kv: true,
            },
          },
          ...(revision === undefined ? [] : [{ request_delete_range: { key: myKey } }]),
        ],
        failure: [],
      });
    } catch (error) {
      if (!indeterminate(error)) context.leases.detached(lease.id);
      throw error;
    }
    if (!response.succeeded) {
      // Someone else's grant or refresh (or our entry's end) got in since the read: read again.
      context.leases.detached(lease.id);
      return { kind: 'again' };
    }
    this.myRevision = undefined;
    const previous = response.responses[0]?.response_put.prev_kv;
    if (previous && previous.lease !== lease.id) context.leases.detached(previous.lease);
    const token = previous ? previous.create_revision : response.header.revision;
    return this.checked(this.grantOf(token, lease), lease, this.holderKey);
  }

  private async remember(look: () => Promise<QueueStep>): Promise<QueueStep> {
    const step = await look();
    if (step.kind !== 'granted') this.previous = step;
    return step;
  }

  /**
   * Our predecessor took the lock and no event since says it was freed: sleep on the lock
   * without asking etcd (a transaction) what the watch already told us. Only what we sleep on
   * depends on it; the grant's transaction checks everything again. A release seen while we
   * ask for the holder's remaining lease makes us look again.
   */
  private async sleepOnKnownHolder(limit: Budget, lease: string | undefined): Promise<QueueStep> {
    const ttlRemainingMs = lease ? await this.context.remainingOfLease(limit, lease) : undefined;
    return { kind: 'holder', ttlRemainingMs };
  }

  private grantOf(token: string, lease: LockLease): Grant {
    const { name, owner } = this.request;
    return { name, owner, token: BigInt(token), ttlMs: lease.ttlMs };
  }

  /** Not queued: take the free lock, refresh our own, or join the queue. */
  private async joinOrTake(limit: Budget): Promise<QueueStep> {
    const { context } = this;
    // Under contention the lock is held and the lease not used: a pooled lease is renewed
    // only once the transaction took the lock (see `reported`).
    const early = this.confirmedLease ? undefined : context.leases.reserve(this.leaseTtlMs);
    const lease = early ?? (await context.leases.take(limit, this.leaseTtlMs));
    const sessionLease = await context.session.leaseId(limit);
    this.myKey = Buffer.concat([this.queueStart, Buffer.from(randomBytes(8).toString('hex'))]);
    let response: ITxnResponse;
    try {
      response = await context.txn(limit, 'idempotent', this.joinTxn(lease.id, sessionLease));
    } catch (error) {
      return this.joinFailed(error, lease.id, sessionLease, early !== undefined);
    }
    if (response.succeeded) return this.reported(limit, response.header.revision, lease, early);
    const nested = response.responses[0]?.response_txn;
    if (nested?.succeeded) {
      const previous = nested.responses[0]?.response_put.prev_kv;
      if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
      if (previous.lease !== lease.id) context.leases.detached(previous.lease);
      return this.reported(limit, previous.create_revision, lease, early);
    }
    context.leases.detached(lease.id);
    const newest = nested?.responses[1]?.response_range.kvs ?? [];
    const ours = newest[0];
    if (!ours?.key.equals(this.myKey)) {
      // A retried put: others joined in between, so the range does not show our neighbour.
      this.myRevision = ours ? await this.revisionOf(limit, this.myKey) : undefined;
      return { kind: 'again' };
    }
    this.myRevision = BigInt(ours.create_revision);
    if (nested?.responses[3]?.response_range.kvs.length) {
      return { kind: 'conflict', conflict: { field: 'mode' } };
    }
    const predecessor = newest[1];
    if (predecessor) return { kind: 'predecessor', key: predecessor.key.toString() };
    const holder =
      nested?.responses[2]?.response_range.kvs[0] ?? nested?.responses[4]?.response_range.kvs[0];
    return {
      kind: 'holder',
      ttlRemainingMs: holder && (await context.remainingOf(limit, holder)),
    };
  }

  /**
   * The same transaction as tryAcquire's, except that it joins the queue instead of failing.
   * Putting the same queue key twice keeps its create revision, so it may be retried after a
   * lost reply.
   */
  private joinTxn(lease: string, sessionLease: string): Parameters<Etcd3['kv']['txn']>[0] {
    const { lockKey, value, queueStart, queueEnd } = this;
    return {
      compare: [
        free(lockKey),
        { ...free(queueStart), range_end: queueEnd },
        noSharedHolder(this.context.keys, this.request.name),
      ],
      success: [{ request_put: { key: lockKey, value, lease } }],
      failure: [
        {
          request_txn: {
            compare: [{ key: lockKey, target: 'Value', result: 'Equal', value }],
            success: [{ request_put: { key: lockKey, value, lease, prev_kv: true } }],
            failure: [
              { request_put: { key: this.myKey, value, lease: sessionLease } },
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
              // Our own shared holder key: held in the other mode, a conflict.
              { request_range: { key: this.holderKey, keys_only: true } },
              // The oldest shared holder: its lease is the fallback timer when readers hold it.
              oldestSharedHolder(this.context.keys, this.request.name),
            ],
          },
        },
      ],
    };
  }

  private joinFailed(
    error: unknown,
    lease: string,
    sessionLease: string,
    early: boolean,
  ): QueueStep {
    const { context } = this;
    if (early && leaseInvalid(error)) {
      // Most likely the pooled lease was gone (the waiter lease is tried next): the branch
      // that puts the lock key on it applied nothing. Join again on a confirmed lease.
      this.confirmedLease = true;
      void this.dequeuer.dequeue(this.myKey);
      return { kind: 'again' };
    }
    if (leaseInvalid(error)) {
      context.leases.detached(lease);
      // The waiter lease ran out (this server or etcd stalled for its TTL) before its
      // keepalive noticed: join again on a new one, once.
      if (this.leaseRenewed) throw error;
      this.leaseRenewed = true;
      context.session.invalidate(sessionLease);
      return { kind: 'again' };
    }
    if (!indeterminate(error)) context.leases.detached(lease);
    else void this.dequeuer.dequeue(this.myKey);
    throw error;
  }

  private async revisionOf(limit: Budget, key: Buffer): Promise<bigint | undefined> {
    const response = await withRetries(limit, 'idempotent', false, (deadline) =>
      this.context.client.kv.range({ key }, { deadline }),
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
  private async takeFromHead(
    limit: Budget,
    revision: bigint,
    lockSeenFree: boolean,
  ): Promise<QueueStep> {
    const { context } = this;
    const early = this.confirmedLease ? undefined : context.leases.reserve(this.leaseTtlMs);
    const renewing = early && lockSeenFree ? early.renew(limit) : undefined;
    const lease = early ?? (await context.leases.take(limit, this.leaseTtlMs));
    /** Gives the lease back for reuse (once a renewal sent has settled). */
    const giveBack = () => {
      if (renewing) void renewing.then(() => context.leases.detached(lease.id));
      else context.leases.detached(lease.id);
    };
    let response: ITxnResponse;
    try {
      response = await context.txn(limit, 'idempotent', this.headTxn(lease.id, revision));
    } catch (error) {
      if (early && leaseInvalid(error)) {
        // The pooled lease was gone: nothing was applied (or, after a lost reply, what was
        // went with the lease). Look again on a lease whose renewal etcd confirmed first.
        this.confirmedLease = true;
        return { kind: 'again' };
      }
      if (!indeterminate(error)) giveBack();
      throw error;
    }
    if (response.succeeded) {
      this.myRevision = undefined;
      return this.reported(limit, response.header.revision, lease, early);
    }
    giveBack();
    if (!response.responses[0]?.response_range.kvs.length) {
      // Our entry is gone (its lease ran out while etcd or this server stalled, or a retried
      // transaction had in fact taken the lock): start over; joining also finds a lock that
      // is already ours.
      this.myRevision = undefined;
      return { kind: 'again' };
    }
    const predecessor = response.responses[1]?.response_range.kvs[0];
    if (predecessor) return { kind: 'predecessor', key: predecessor.key.toString() };
    // Shared holders: any one's end wakes us; the oldest one's lease is the fallback timer.
    const holder =
      response.responses[2]?.response_range.kvs[0] ?? response.responses[3]?.response_range.kvs[0];
    if (!holder) return { kind: 'again' };
    return { kind: 'holder', ttlRemainingMs: await context.remainingOf(limit, holder) };
  }

  /**
   * Reads the queue's entries created before `revision` (ahead of our entry, created at it),
   * keys only, in `order` of creation; the first `limit` of them when given.
   */
  private entriesAhead(revision: bigint, order: 'Ascend' | 'Descend', limit?: number): IRequestOp {
    return {
      request_range: {
        key: this.queueStart,
        range_end: this.queueEnd,
        max_create_revision: (revision - 1n).toString(),
        sort_order: order,
        sort_target: 'Create',
        ...(limit === undefined ? {} : { limit }),
        keys_only: true,
      },
    };
  }

  private headTxn(lease: string, revision: bigint): Parameters<Etcd3['kv']['txn']>[0] {
    const { lockKey, value, queueStart, queueEnd, myKey } = this;
    return {
      compare: [
        // Still queued: the wait's lease did not end while we slept (etcd-io/etcd#11456).
        createdAt(myKey, revision.toString()),
        // Nobody older waits: every key of the queue was created at or after ours.
        {
          key: queueStart,
          range_end: queueEnd,
          target: 'Create',
          result: 'Greater',
          create_revision: (revision - 1n).toString(),
        },
        free(lockKey),
        noSharedHolder(this.context.keys, this.request.name),
      ],
      success: [
        { request_put: { key: lockKey, value, lease } },
        { request_delete_range: { key: myKey } },
      ],
      failure: [
        { request_range: { key: myKey, keys_only: true } },
        this.entriesAhead(revision, 'Descend', 1),
        { request_range: { key: lockKey } },
        // The shared holder with the lowest token, when shared holders hold the name.
        oldestSharedHolder(this.context.keys, this.request.name),
      ],
    };
  }

  /**
   * We took the lock (`token`) on `lease`: report it once the lease is known to run its TTL
   * from a known moment. A pooled lease sent before its renewal was confirmed (`early`) is
   * renewed now if that was not sent yet, and the grant counts from when it was sent.
   */
  private async reported(
    limit: Budget,
    token: string,
    lease: LockLease | ReservedLease,
    early: ReservedLease | undefined,
  ): Promise<QueueStep> {
    if (!early) return this.checked(this.grantOf(token, lease as LockLease), lease as LockLease);
    const renewed = await early.renew(limit);
    return renewed
      ? this.checked(this.grantOf(token, renewed), renewed)
      : this.moved(token, early.id);
  }

  /**
   * We took the lock on a pooled lease whose renewal etcd did not confirm: move the key to a
   * confirmed lease before reporting the grant. If the key is gone, it went with its lease
   * and the lock was never reported: queue again.
   */
  private async moved(token: string, unconfirmed: string): Promise<QueueStep> {
    const { context, lockKey, value } = this;
    const limit = budget('acquire', context.commandTimeoutMs);
    const ours = createdAt(lockKey, token);
    let lease: LockLease | undefined;
    let response: ITxnResponse;
    try {
      lease = await context.leases.take(limit, this.leaseTtlMs);
      response = await context.txn(limit, 'idempotent', {
        compare: [ours],
        success: [{ request_put: { key: lockKey, value, lease: lease.id } }],
        failure: [],
      });
    } catch (error) {
      if (lease && !indeterminate(error)) context.leases.detached(lease.id);
      // Not reported, so nobody will release it: give it back if etcd answers.
      void context
        .txn(budget('release', context.commandTimeoutMs), 'once', {
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
    return this.checked(this.grantOf(token, lease), lease);
  }

  /** No grant is reported whose lease may already have run out (S5). */
  private async checked(
    grant: Grant,
    lease: LockLease,
    lockKey = this.lockKey,
  ): Promise<QueueStep> {
    const { context } = this;
    if (this.clock.now() - lease.sentAt < grant.ttlMs) return { kind: 'granted', grant };
    const limit = budget('release', context.commandTimeoutMs);
    const response = await context
      .txn(limit, 'once', {
        compare: [createdAt(lockKey, `${grant.token}`)],
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
}
