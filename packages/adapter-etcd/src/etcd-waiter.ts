import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  DlmError,
  decideGrant,
  type QueueChange,
  type QueueDriver,
  type QueueStep,
} from '@dlm/core';
import { EtcdLeaseInvalidError, type IKeyValue, type ITxnResponse } from 'etcd3';
import { type Budget, budget, withRetries } from './etcd-calls.js';
import { delayLeftMs, detachPrevious } from './etcd-delay.js';
import { type GrantLease, leaseForGrant, refreshHolder, reportGrant } from './etcd-grant-lease.js';
import type { Clamp } from './etcd-hold-cap.js';
import type { LastGrant, QueueContext } from './etcd-queue.js';
import { placeInQueue } from './etcd-queue-reads.js';
import {
  entryId,
  grantValueAt,
  lookTxn,
  type Place,
  specOfEntry,
  type WaiterKeys,
  waiterKeys,
} from './etcd-queue-txn.js';
import {
  aheadOfView,
  entryWaitedOn,
  ruleHoldersOf,
  takenByAnother,
  type View,
  viewOf,
} from './etcd-queue-view.js';
import { decidedOnceFreed, roomWaitedOn } from './etcd-shared-room.js';

/**
 * etcd's queue driver: one queued acquire, its queue key, and what the watch told it. Each join
 * and look is one transaction for either mode (etcd-queue-txn.ts); the grant rule is core's; the
 * lease a grant goes on has its own fast path (etcd-grant-lease.ts). The queue it belongs to is
 * etcd-queue.ts's.
 */
export class EtcdWaiter implements QueueDriver {
  private readonly w: WaiterKeys;
  private place: Place;
  /** The last step this waiter was given (other than a grant). */
  private previous: QueueStep['kind'] = 'again';
  private leaseRenewed = false;
  /** A pooled lease turned out to be gone: take the next one only once etcd renewed it. */
  private confirmedLease = false;
  /** Shared: granted once the exclusive entry it sleeps on has come and gone (its last read). */
  private roomOnceFreed = false;

  constructor(
    private readonly context: QueueContext,
    private readonly lastGrant: LastGrant,
    private readonly request: AcquireRequest,
  ) {
    this.w = waiterKeys(context.keys, request, context.minTtlMs);
    this.place = this.unqueued();
  }

  entry(): string | undefined {
    return this.place.queued ? this.place.myKey.toString() : undefined;
  }

  stop(): void {}

  async leave(entry: string): Promise<void> {
    const key = Buffer.from(entry);
    await withRetries(
      budget('dequeue', this.context.commandTimeoutMs),
      'idempotent',
      true,
      (deadline) => this.context.client.kv.deleteRange({ key }, { deadline }),
    );
  }

  join(): Promise<QueueStep> {
    return this.remember(() => this.step());
  }

  position(): Promise<number | undefined> {
    return placeInQueue(this.context, this.w.queueStart, this.place);
  }

  look(predecessorLeft?: QueueChange): Promise<QueueStep> {
    const grant = this.lastGrant.get(this.request.name);
    // Our predecessor took the lock in the revision that deleted its entry, and no event since
    // says it was freed: sleep on that holder without a transaction. The grant's transaction
    // checks everything again when it goes. A shared waiter does so when the entry it slept on
    // was exclusive (the last one that had to go first: it holds the name now, and only its end
    // can let this waiter in, so a read would only find it there).
    const known = predecessorLeft?.mark !== undefined && grant?.revision === predecessorLeft.mark;
    const exclusiveLeft =
      predecessorLeft?.key !== undefined && specOfEntry(predecessorLeft.key).mode === 'exclusive';
    if (known && (this.w.rule.mode === 'exclusive' || exclusiveLeft)) {
      // Shared: its last read counted the room behind that entry (etcd-shared-room.ts).
      if (this.place.queued && exclusiveLeft) this.place.decided = this.roomOnceFreed;
      return this.remember(() => this.holder(grant.lease));
    }
    return this.remember(() => this.step());
  }

  private async remember(look: () => Promise<QueueStep>): Promise<QueueStep> {
    const step = await look();
    if (step.kind !== 'granted') this.previous = step.kind;
    return step;
  }

  private unqueued(): Place {
    const id = entryId(this.w.rule, randomBytes(8).toString('hex'));
    return { queued: false, myKey: Buffer.concat([this.w.queueStart, Buffer.from(id)]) };
  }

  /** Sleep on the holder whose key is on `lease`, its remaining lease the fallback timer. */
  private async holder(
    lease: string | undefined,
    limit = budget('acquire', this.context.commandTimeoutMs),
  ): Promise<QueueStep> {
    const ttlRemainingMs = lease ? await this.context.remainingOfLease(limit, lease) : undefined;
    return { kind: 'holder', ttlRemainingMs };
  }

  /** One transaction: granted, or the view the grant rule decides on (etcd-queue-txn.ts). */
  private async step(): Promise<QueueStep> {
    const { context, w } = this;
    const place = this.place;
    const limit = budget('acquire', context.commandTimeoutMs);
    await context.watchEstablished(limit);
    // Shared and queued, the rule decides on a read before the transaction may grant.
    const grants = !place.queued || w.rule.mode === 'exclusive' || place.decided;
    const lease = grants
      ? await leaseForGrant(context, limit, w.leaseTtlMs, {
          // A capped grant takes a confirmed lease: a grant on a pooled lease whose renewal
          // failed moves its key (`moved`) to a lease that runs from later than the cap counts.
          confirmedOnly: this.confirmedLease || w.maxHoldMs !== undefined,
          renewNow: place.queued && this.previous === 'holder',
          delayMs: w.delayMs,
        })
      : undefined;
    const session = place.queued ? undefined : await context.session.leaseId(limit);
    let response: ITxnResponse;
    try {
      const value = grantValueAt(w, context.wallClock());
      const txn = lookTxn(context.keys, w, place, lease?.lease.id, session, lease?.delay, value);
      response = await context.txn(limit, 'idempotent', txn);
    } catch (error) {
      return this.failed(error, place, lease, session);
    }
    if (response.succeeded) return this.granted(limit, response, lease!);
    const nested = response.responses[0]?.response_txn;
    if (!place.queued && nested?.succeeded) return this.granted(limit, nested, lease!);
    lease?.giveBack();
    return this.decide(limit, place, viewOf(w, place, response));
  }

  /** The grant (or refresh) applied: our key's create revision is the token. */
  private granted(
    limit: Budget,
    response: Pick<ITxnResponse, 'header' | 'responses'>,
    lease: GrantLease,
    clamp?: Clamp,
  ): Promise<QueueStep> {
    this.place = this.unqueued();
    const previous = response.responses[0]?.response_put.prev_kv;
    if (previous && previous.lease !== lease.lease.id) this.context.leases.detached(previous.lease);
    // A refresh moved (or dropped) the delay key: its previous lease goes back.
    detachPrevious(this.context.leases, response.responses[1], lease.delay);
    const token = previous ? previous.create_revision : response.header.revision;
    return reportGrant(this.context, limit, this.w, token, lease, clamp);
  }

  private async decide(limit: Budget, place: Place, view: View): Promise<QueueStep> {
    const { w } = this;
    if (place.queued && view.gone) {
      // Our entry is gone (its lease ran out while etcd or this server stalled, or a retried
      // transaction had in fact taken the lock): start over; joining also finds our own lock.
      this.place = this.unqueued();
      return { kind: 'again' };
    }
    const queued: Place = place.queued
      ? place
      : { queued: true, myKey: place.myKey, revision: view.myRevision ?? 0n, decided: false };
    this.place = queued;
    if (!place.queued && (view.unplaced || view.myRevision === undefined)) return { kind: 'again' };
    if (takenByAnother(view, this.request)) return this.holder(view.mine!.lease, limit);
    const ahead = aheadOfView(w.rule, view.ahead);
    const decision = decideGrant(w.rule, ruleHoldersOf(view, this.request), ahead);
    const onceFreed = decidedOnceFreed(w.rule, decision, view.lock !== undefined, ahead);
    if (queued.queued) queued.decided = decision.kind === 'grant' || onceFreed.now;
    this.roomOnceFreed = onceFreed.behindEntry;
    switch (decision.kind) {
      case 'conflict':
        return decision;
      case 'refresh':
        return this.refresh(limit, (w.rule.mode === 'shared' ? view.mine : view.lock)!);
      case 'grant':
        return { kind: 'again' };
    }
    const room = roomWaitedOn(w.rule, decision, ahead);
    if (room === 'holders' && view.oldest) return this.holder(view.oldest.lease, limit);
    if (typeof room === 'number') return { kind: 'predecessor', key: view.ahead[room] };
    if (decision.on === 'entry') {
      return { kind: 'predecessor', key: entryWaitedOn(decision, view.ahead, ahead.lastBlocking) };
    }
    if (decision.on === 'delay' && view.delay) {
      // In its lock-delay: woken by the delay key's deletion (the watch), its lease the timer.
      const leaseLeft = await this.context.remainingOfLease(limit, view.delay.lease);
      return { kind: 'holder', ttlRemainingMs: delayLeftMs(view.delay, leaseLeft) };
    }
    const holder = view.lock ?? view.oldest;
    // Shared holders: any one's end wakes us; the oldest one's lease is the fallback timer.
    return holder ? this.holder(holder.lease, limit) : { kind: 'again' };
  }

  /**
   * The requester holds it in this mode and limit: its holder key moves to a new lease (clamped
   * to its cap on holding; at the cap the lease ends, and the next look may grant it afresh).
   */
  private async refresh(limit: Budget, kv: IKeyValue): Promise<QueueStep> {
    const myKey = this.place.queued ? this.place.myKey : undefined;
    const { w } = this;
    const delayKey = w.rule.mode === 'exclusive' ? w.delayKey : undefined;
    const refreshed = await refreshHolder(this.context, limit, w.leaseTtlMs, kv, myKey, delayKey);
    if (refreshed === undefined || refreshed === 'capped') return { kind: 'again' };
    return this.granted(limit, refreshed.response, refreshed.lease, refreshed.clamp);
  }

  private failed(
    error: unknown,
    place: Place,
    lease: GrantLease | undefined,
    session: string | undefined,
  ): QueueStep {
    const { context } = this;
    if (lease?.early && leaseInvalid(error)) {
      // Most likely the pooled lease was gone: the transaction applied nothing. Try again on a
      // lease whose renewal etcd confirmed first.
      this.confirmedLease = true;
      if (!place.queued) void this.leave(place.myKey.toString()).catch(() => undefined);
      return { kind: 'again' };
    }
    if (!place.queued && session !== undefined && leaseInvalid(error)) {
      lease?.giveBack();
      // The waiter lease ran out (this server or etcd stalled for its TTL) before its
      // keepalive noticed: join again on a new one, once.
      if (this.leaseRenewed) throw error;
      this.leaseRenewed = true;
      context.session.invalidate(session);
      return { kind: 'again' };
    }
    if (!(error instanceof DlmError && error.details.indeterminate)) lease?.giveBack();
    // Our queue key may be in: the loop removes it as it leaves (retrying).
    else if (!place.queued)
      this.place = { queued: true, myKey: place.myKey, revision: 0n, decided: false };
    throw error;
  }
}

const leaseInvalid = (error: unknown): boolean =>
  error instanceof DlmError && error.cause instanceof EtcdLeaseInvalidError;
