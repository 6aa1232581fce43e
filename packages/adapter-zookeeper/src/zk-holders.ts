import type { AcquireRequest, QueueStep, RuleAhead } from '@dlm/core';
import { decideGrant, MAX_TIMER_MS } from '@dlm/core';
import { type Event, Event as ZkEvent } from 'node-zookeeper-client';
import { recordedHolder } from './zk-data.js';
import {
  type Children,
  type Current,
  isOwnLease,
  type LockStore,
  type NameNode,
} from './zk-locks.js';
import { endOf, liveHolders } from './zk-modes.js';
import type { EntrySpec } from './zk-paths.js';
import type { Budget } from './zk-session.js';

/**
 * What a waiter of ZooKeeper's queue does about the holders: once after joining, whether the
 * lock is already its own; at the head, end those whose lease is over, refresh its own, take
 * room beside them, or sleep on them. With its fast paths: a look that will probably grant
 * reads the name node with the children (one round trip), and the take-over of a persistent
 * holder's end (see `sleptOn`).
 */

/** What the holders' side needs of its waiter (zk-queue.ts). */
export interface HeadWaiter {
  readonly store: LockStore;
  readonly request: AcquireRequest;
  readonly spec: EntrySpec;
  /** The name node's path. */
  readonly parent: string;
  readonly leaseTtlMs: number;
  readonly onWatch: (event: Event) => void;
  /** Takes the lock at the name node's version (and leaves the queue when `mine` is given). */
  take(
    limit: Budget,
    node: Pick<NameNode, 'data' | 'version'>,
    mine?: string,
  ): Promise<QueueStep | undefined>;
  /** Our waiter node `path` is gone. */
  gone(path: string): void;
  grantOf(token: bigint, path: string): QueueStep;
}

export class QueueHead {
  /** The holder the name node recorded when we joined: who it is, if it still holds. */
  private joinedBehind: { owner: string; attemptId: string } | undefined;
  ownerChecked = false;
  /**
   * The next look will probably grant (we are at the head, and slept on the holder): read the
   * name node's data (for the grant) together with the children, in one round trip.
   */
  private likelyGrant = false;
  /**
   * At the head, the persistent holder we sleep on, and the name node's version when we saw
   * it (in the same snapshot as the children). Such a holder only goes by an end, which is the
   * name node's next write: once its node is deleted, the name node at exactly the next version
   * means nothing else happened since — no grant, and we are still at the head — so we take the
   * lock at that version at once, without reading again. Anything else fails the multi-op.
   */
  private sleptOn: { path: string; version: number; gone: boolean } | undefined;

  constructor(private readonly w: HeadWaiter) {}

  /** We joined the queue behind the name node `node` (read before, when uncontended). */
  joined(node: NameNode | undefined): void {
    this.joinedBehind = node && recordedHolder(node.data);
    this.ownerChecked = false;
    this.likelyGrant = false;
  }

  /** A watch fired: the holder we sleep on may be the node deleted. */
  watched(event: Event): void {
    const slept = this.sleptOn;
    if (slept && event.getType() === ZkEvent.NODE_DELETED && event.getPath() === slept.path) {
      slept.gone = true;
    }
  }

  /** The holder we slept on was deleted: take the lock if its end was the only write. */
  async takeOver(limit: Budget, mine: string): Promise<QueueStep | undefined> {
    const slept = this.sleptOn;
    this.sleptOn = undefined;
    if (!slept?.gone) return undefined;
    const taken = await this.w.take(
      limit,
      { data: Buffer.alloc(0), version: slept.version + 1 },
      mine,
    );
    if (!taken) this.likelyGrant = true;
    return taken;
  }

  /**
   * The children come with the name node's version in the same reply: that version guards the
   * grant against anything granted after this read. When a grant is likely, the name node's
   * data (which the grant rewrites) is read in the same round trip, before.
   */
  async readQueue(
    limit: Budget,
  ): Promise<{ node: NameNode | undefined; children: Children | undefined }> {
    const { store } = this.w;
    const { name } = this.w.request;
    const expectGrant = this.likelyGrant;
    this.likelyGrant = false;
    if (!expectGrant) return { node: undefined, children: await store.childrenOf(limit, name) };
    const [node, children] = await Promise.all([
      store.nameNode(limit, name),
      store.childrenOf(limit, name),
    ]);
    return { node, children };
  }

  /**
   * Once after joining: if the lock is already ours (granted to this owner through another dlm
   * server, whose reply was lost), waiting behind others for it would never end.
   */
  async ownLockOnce(limit: Budget, children: Children, mine: string, ahead: RuleAhead) {
    const { store } = this.w;
    const { name, owner, keyHash } = this.w.request;
    this.ownerChecked = true;
    const behind = this.joinedBehind;
    // Known without a read: a lease granted here, or the holder recorded when we joined.
    const candidates = children.holders.filter((child) => {
      const known =
        store.knownOwner(name, `${this.w.parent}/${child}`) ??
        (behind && child.startsWith(`${behind.attemptId}-`) ? behind.owner : undefined);
      return known === undefined || known === owner;
    });
    if (!candidates.length) return undefined;
    const holders = await store.readHolders(limit, name, { holders: candidates });
    const own = holders.find((holder) => isOwnLease(holder, owner, keyHash));
    if (!own) return undefined;
    const spec = { mode: own.mode, limit: own.limit };
    const decision = decideGrant(this.w.spec, { count: 1, ...spec, own: spec }, ahead);
    return decision.kind === 'conflict' ? decision : this.refreshOwn(limit, own, mine);
  }

  /** The lock is already this owner's: refresh it (same token) and leave the queue. */
  async refreshOwn(limit: Budget, holder: Current, mine: string): Promise<QueueStep> {
    const { store } = this.w;
    const { name } = this.w.request;
    const refreshed = await store.refresh(limit, name, holder, this.w.leaseTtlMs, (ops) =>
      ops.remove(mine, -1),
    );
    if (!refreshed) return { kind: 'again' };
    this.w.gone(mine);
    if (refreshed.expired) {
      await store.endLease(
        limit,
        name,
        Object.assign({}, holder, { version: refreshed.version }),
        'expired',
      );
      return { kind: 'again' };
    }
    return this.w.grantOf(holder.token, holder.path);
  }

  /**
   * First in line, behind holders: end those whose lease is over, refresh our own, take room
   * beside shared ones, or sleep on them (each is watched, with the end that would let us in as
   * the timer: no expiry is announced).
   */
  async behind(
    limit: Budget,
    mine: string,
    node: NameNode | undefined,
    children: Children,
    ahead: RuleAhead,
  ): Promise<QueueStep> {
    const { store } = this.w;
    const { name } = this.w.request;
    const holders = await store.readHolders(limit, name, children, this.w.onWatch);
    this.likelyGrant = true;
    const only =
      children.holders.length === 1 ? `${this.w.parent}/${children.holders[0]}` : undefined;
    // The end of the only holder frees the name: then only its end rewrote the name node.
    const freedByItsEnd = this.w.spec.mode === 'exclusive' || ahead.shared < this.w.spec.limit;
    if (!holders.length) {
      // Gone since the children were read. If it was persistent, its end was the name node's
      // next write (as when it goes while we sleep on it): try that version.
      if (only && freedByItsEnd && store.persistentHere(only)) {
        const taken = await this.w.take(
          limit,
          { data: Buffer.alloc(0), version: children.version + 1 },
          mine,
        );
        if (taken) return taken;
      }
      return { kind: 'again' };
    }
    const left = await store.leasesLeft(limit, holders);
    const expired = left.filter((entry) => entry.expired);
    if (expired.length) {
      for (const { holder } of expired) await store.endLease(limit, name, holder, 'expired');
      return { kind: 'again' };
    }
    const live = liveHolders(left, this.w.request);
    const decision = decideGrant(this.w.spec, live.holders, ahead);
    if (decision.kind === 'refresh') return this.refreshOwn(limit, live.own!, mine);
    if (decision.kind === 'conflict') return decision;
    if (decision.kind === 'grant') {
      if (holders.length !== children.holders.length) return { kind: 'again' };
      return this.free(limit, mine, node, children);
    }
    // The holders' data moved since their names were read (an entry wait): look again. (No
    // lock-delay wait: holders hold, and the rule heeds a delay only without any.)
    if (decision.on !== 'holder') return { kind: 'again' };
    // A holder with a lock-delay is never taken over at the next version unread: its end may
    // start the delay, which only the name node's marker tells (`free` reads it).
    const plain = !holders[0]?.lockDelayMs;
    if (only && holders.length === 1 && holders[0]!.persistent && freedByItsEnd && plain) {
      this.sleptOn = { path: only, version: children.version, gone: false };
    }
    return { kind: 'holder', ttlRemainingMs: Math.min(endOf(left, decision.end), MAX_TIMER_MS) };
  }

  /**
   * At the head, and free: the grant rewrites the name node's data, read at the version the
   * children were read at (if it moved, something was granted or ended: look again).
   */
  async free(
    limit: Budget,
    mine: string,
    read: NameNode | undefined,
    children: Children,
  ): Promise<QueueStep> {
    const node = read ?? (await this.w.store.nameNode(limit, this.w.request.name));
    if (node && node.version === children.version) {
      // Core's rule 5: free, but in its lock-delay (the last end's marker, at the version the
      // grant would write): sleep until it is over on ZooKeeper's clock. Nobody announces the
      // end of a delay, as nobody announces an expiry: its time left is the timer.
      const lockDelayMs = await this.w.store.delayLeft(limit, node);
      if (lockDelayMs > 0) {
        this.likelyGrant = true;
        return { kind: 'holder', ttlRemainingMs: Math.min(lockDelayMs, MAX_TIMER_MS) };
      }
    }
    const taken =
      node && node.version === children.version ? await this.w.take(limit, node, mine) : undefined;
    if (taken) return taken;
    this.likelyGrant = true;
    return { kind: 'again' };
  }
}
