import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type Clock,
  createFairQueue,
  DlmError,
  type FairQueueDriver,
  MAX_TIMER_MS,
  type QueueStep,
  type QueueWatcher,
  systemClock,
} from '@dlm/core';
import { Event, Exception } from 'node-zookeeper-client';
import { recordedHolder } from './zk-data.js';
import {
  type Current,
  type HandOverTo,
  isOwnLease,
  type LockStore,
  type NameNode,
} from './zk-locks.js';
import { aheadOf, judge, specOfRequest } from './zk-modes.js';
import { type EntrySpec, type LockPaths, specOf } from './zk-paths.js';
import { type Budget, budget, CreateMode, isZkCode, type ZkSession } from './zk-session.js';

export interface QueueContext {
  session: ZkSession;
  paths: LockPaths;
  store: LockStore;
  commandTimeoutMs: number;
  minTtlMs: number;
  isClosed(): boolean;
  /** Called with every grant this queue makes (the backend's own bookkeeping). */
  onGrant(name: string, owner: string, path: string, token: bigint): void;
  /** Timers of the wait loop. Default: the system's. */
  clock?: Clock;
}

/**
 * The waiters' queue, as ZooKeeper's lock recipe builds it: each waiter creates an ephemeral
 * sequential node under the name node (so a waiter whose dlm server died leaves the queue with
 * its session); sequence numbers order the queue. A waiter watches only its predecessor's node
 * (a release wakes one waiter, not all); at the head it watches the holder's node, with the
 * holder's remaining lease on ZooKeeper's clock as the timer for an expiry nobody announces.
 * The wait loop is core's (`createFairQueue`); this file is ZooKeeper's driver for it.
 *
 * The head takes the lock in one multi-op that creates the holder node, deletes its own waiter
 * node and rewrites the name node at the version read before it looked: if its waiter node is
 * gone (its session expired while it slept, so it is no longer queued) or anything else was
 * granted meanwhile, nothing happens and it looks again. The lease runs from that multi-op.
 */
export function fairQueue(context: QueueContext) {
  const here: QueuedHere = { byName: new Map(), removed: new Set() };
  const queue = createFairQueue({
    clock: context.clock ?? systemClock,
    backend: 'ZooKeeper',
    isClosed: context.isClosed,
    // Nobody announces an expiry: look again just after the holder's lease should be over.
    expirySlackMs: 50,
    driver: (request, watcher) => new ZkWaiter(context, here, request, watcher),
  });
  // Watches may not survive a lost session, and the session's waiter nodes do not: after a
  // reconnect or a new session, every waiter looks again.
  context.session.onState((state) => {
    if (state !== 'disconnected') queue.wakeAll();
  });
  return {
    ...queue,
    /**
     * A release of `lease` (granted here) that hands the lock to this backend's waiter at the
     * head of the queue, in the same multi-op. False: no such waiter, or something changed
     * (nothing was applied; release it the usual way).
     */
    handOver(limit: Budget, name: string, lease: Current): Promise<boolean> {
      const head = headHere(here, name);
      // An exclusive lease frees the name for whichever head; a shared one frees one room,
      // for a shared head with the same limit only.
      const fits =
        lease.mode === 'exclusive'
          ? lease.nameVersion !== undefined
          : head?.spec.mode === 'shared' && head.spec.limit === lease.limit;
      if (!head || !fits) return Promise.resolve(false);
      return head.takeHandOver(limit, lease);
    },
  };
}

/** The waiters this backend has queued, and the waiter nodes it deleted lately. */
interface QueuedHere {
  byName: Map<string, Set<ZkWaiter>>;
  /** Waiter nodes whose deletion this backend saw succeed (most recent last). */
  removed: Set<string>;
}

/** The most waiters ahead a waiter remembers; one further back is never handed a lock. */
const AHEAD_MAX = 16;
/** The most deleted waiter nodes remembered. */
const REMOVED_MAX = 10_000;

function noteRemoved(here: QueuedHere, path: string): void {
  here.removed.add(path);
  if (here.removed.size > REMOVED_MAX) here.removed.delete(here.removed.values().next().value!);
}

/**
 * This backend's waiter at the head of `name`'s queue, if it knows one: every waiter that was
 * ahead of it when it last looked is gone by this backend's own hand (nodes ahead cannot
 * appear later: sequence numbers only grow). Remote waiters gone by themselves are not known
 * gone, so then nobody is: the release goes the usual way, and the queue too.
 */
function headHere(here: QueuedHere, name: string): ZkWaiter | undefined {
  let head: ZkWaiter | undefined;
  for (const waiter of here.byName.get(name) ?? []) {
    if (waiter.mayBeHandedOver(here.removed) && (!head || waiter.queuedBefore(head))) head = waiter;
  }
  return head;
}

type Children = NonNullable<Awaited<ReturnType<LockStore['childrenOf']>>>;

const attemptIdOf = () => randomBytes(8).toString('hex');

/** One queued acquire: its waiter node, and what it learnt of the holder. */
class ZkWaiter implements FairQueueDriver {
  private readonly parent: string;
  private readonly leaseTtlMs: number;
  readonly spec: EntrySpec;
  /** Our waiter node's path while we are queued (set through `setQueued`). */
  private myPath: string | undefined;
  /** The holder the name node recorded when we joined: who it is, if it still holds. */
  private joinedBehind: { owner: string; attemptId: string } | undefined;
  private ownerChecked = false;
  /**
   * The next look will probably grant (we are at the head, and slept on the holder): read the
   * name node's data (for the grant) together with the children, in one round trip.
   */
  private likelyGrant = false;
  /**
   * At the head, the persistent holder we sleep on, and the name node's version when we saw
   * it (in the same snapshot as the children). Such a holder only goes by an end, which is
   * the name node's next write: once its node is deleted, the name node at exactly the next
   * version means nothing else happened since — no grant, and we are still at the head (no
   * waiter queues ahead of one that was first) — so we take the lock at that version at
   * once, without reading again. Anything else in between fails the multi-op: look again.
   */
  private sleptOn: { path: string; version: number; gone: boolean } | undefined;
  /** The waiter nodes ahead of ours when we last looked (undefined: not looked, or too many). */
  private ahead: string[] | undefined;
  /** A release handing us the lock is on its way: our node may vanish by its hand. */
  private offer: Promise<boolean> | undefined;
  /** A release handed us the lock: the grant the next look reports. */
  private handedOver: { token: bigint; path: string } | undefined;
  private collected = false;
  private stopped = false;

  constructor(
    private readonly context: QueueContext,
    private readonly here: QueuedHere,
    private readonly request: AcquireRequest,
    private readonly watcher: QueueWatcher,
  ) {
    this.parent = context.paths.parent(request.name);
    this.leaseTtlMs = Math.max(request.ttlMs, context.minTtlMs);
    this.spec = specOfRequest(request);
  }

  // One function for every watch this waiter sets: ZooKeeper clients keep one registration
  // per function and path, so looking again does not pile up watchers.
  private readonly onWatch = (event: Event) => {
    const slept = this.sleptOn;
    if (slept && event.getType() === Event.NODE_DELETED && event.getPath() === slept.path) {
      slept.gone = true;
    }
    this.watcher.changed();
  };

  queued(): boolean {
    return this.myPath !== undefined;
  }

  stop(): void {
    // ZooKeeper watches are one-shot and cannot be taken back; the loop ignores a late one.
    this.stopped = true;
    this.dropUncollected();
  }

  async leave(): Promise<void> {
    const path = this.myPath!;
    this.setQueued(undefined);
    const { store } = this.context;
    await store
      .removeQuietly(budget('dequeue', this.context.commandTimeoutMs), path)
      .then(() => noteRemoved(this.here, path))
      .catch(() => store.removeLater(path));
  }

  join(): Promise<QueueStep> {
    return this.joinQueue(budget('acquire', this.context.commandTimeoutMs));
  }

  async look(): Promise<QueueStep> {
    // A release handing us the lock wakes us (its deletion of the holder we sleep on) before
    // its reply: wait for its outcome rather than try to take the lock ourselves.
    if (this.offer) await this.offer.catch(() => false);
    let step: QueueStep | undefined;
    try {
      if (!this.handedOver) step = await this.lookAt(this.lookBudget(), this.myPath!);
    } catch (error) {
      if (!this.offer && !this.handedOver) throw error;
    }
    // What a look saw while a release was handing us the lock (our node gone, the lock
    // held) is that release's doing: its outcome decides.
    if (this.offer) await this.offer.catch(() => false);
    return this.collect() ?? step ?? { kind: 'again' };
  }

  private lookBudget(): Budget {
    return budget('acquire', this.context.commandTimeoutMs);
  }

  /** Queued, at the head by what this backend knows, and not leaving: see `headHere`. */
  mayBeHandedOver(removed: Set<string>): boolean {
    return (
      this.myPath !== undefined &&
      !this.stopped &&
      !this.offer &&
      this.ahead?.every((path) => removed.has(path)) === true
    );
  }

  queuedBefore(other: ZkWaiter): boolean {
    // Zero-padded sequence numbers end every waiter node's name: as strings they sort in order.
    return (this.myPath ?? '').slice(-10) < (other.myPath ?? '').slice(-10);
  }

  /** A release of `lease` hands us the lock (see `LockStore.handOver`). */
  takeHandOver(limit: Budget, lease: Current): Promise<boolean> {
    const mine = this.myPath!;
    const { owner, keyHash } = this.request;
    const to: HandOverTo = {
      owner,
      keyHash,
      ttlMs: this.leaseTtlMs,
      waiterPath: mine,
      spec: this.spec,
    };
    const offer = this.context.store
      .handOver(limit, this.request.name, lease, to, attemptIdOf())
      .then((granted) => {
        if (!granted) return false;
        noteRemoved(this.here, mine);
        this.setQueued(undefined);
        this.handedOver = granted;
        if (this.stopped) this.dropUncollected();
        else this.watcher.changed();
        return true;
      })
      .finally(() => {
        this.offer = undefined;
      });
    this.offer = offer;
    return offer;
  }

  /** The handed-over grant, once: the look that reports it. */
  private collect(): QueueStep | undefined {
    const handed = this.handedOver;
    if (!handed || this.collected) return undefined;
    this.collected = true;
    return this.grantOf(handed.token, handed.path);
  }

  /** The wait ended without taking the lock it was handed: release that lease. */
  private dropUncollected(): void {
    const handed = this.handedOver;
    if (!handed || this.collected) return;
    this.collected = true;
    const { store, commandTimeoutMs } = this.context;
    const { name } = this.request;
    const lease = store.ownLease(name, handed.token);
    if (lease) {
      store.endLease(budget('cleanup', commandTimeoutMs), name, lease, 'released').catch(() => {});
    }
  }

  private setQueued(path: string | undefined): void {
    const { name } = this.request;
    const { byName } = this.here;
    const mine = byName.get(name) ?? new Set<ZkWaiter>();
    if (path) mine.add(this);
    else mine.delete(this);
    if (mine.size > 0) byName.set(name, mine);
    else byName.delete(name);
    this.myPath = path;
    if (!path) this.ahead = undefined;
  }

  private grantOf(token: bigint, path: string): QueueStep {
    const { name, owner } = this.request;
    this.context.onGrant(name, owner, path, token);
    return { kind: 'granted', grant: { name, owner, token, ttlMs: this.leaseTtlMs } };
  }

  /** Creates the holder node at the name node's `node.version`, with `more` in the multi-op. */
  private createHolder(
    limit: Budget,
    node: Pick<NameNode, 'data' | 'version'>,
    more?: Parameters<LockStore['createHolder']>[7],
  ) {
    const { name, owner, keyHash } = this.request;
    return this.context.store.createHolder(
      limit,
      name,
      node,
      owner,
      keyHash,
      this.leaseTtlMs,
      attemptIdOf(),
      more,
      this.spec,
    );
  }

  /** Takes the lock at `version` of the name node and leaves the queue in the same multi-op. */
  private async takeFromHead(
    limit: Budget,
    mine: string,
    node: Pick<NameNode, 'data' | 'version'>,
  ): Promise<QueueStep | undefined> {
    // A release is handing us the lock: the look ends, and waits for it (see `look`).
    if (this.offer || this.handedOver) return undefined;
    const created = await this.createHolder(limit, node, (ops) => ops.remove(mine, -1));
    if (created.kind !== 'created') return undefined;
    noteRemoved(this.here, mine);
    this.setQueued(undefined);
    return this.grantOf(created.token, created.path);
  }

  /**
   * Not queued: take the lock when nothing is under its name node (the uncontended case:
   * one read, one multi-op), else join the queue at once — a waiter's place is its arrival,
   * so everything else (our own lock again, an expired holder) is settled by `look`.
   */
  private async joinQueue(limit: Budget): Promise<QueueStep> {
    const { store } = this.context;
    const { name } = this.request;
    await store.ensureParent(limit, name);
    // Others of ours already queue for it: it is neither free nor uncontended, so join the
    // queue without reading the name node first.
    const contended = (this.here.byName.get(name)?.size ?? 0) > 0;
    const node = contended ? undefined : await store.nameNode(limit, name);
    if (!node && !contended) {
      store.forgetParent(name);
      return { kind: 'again' };
    }
    if (node?.numChildren === 0) {
      const created = await this.createHolder(limit, node);
      return created.kind === 'created'
        ? this.grantOf(created.token, created.path)
        : { kind: 'again' };
    }
    return this.enqueue(limit, node);
  }

  private async enqueue(limit: Budget, node: NameNode | undefined): Promise<QueueStep> {
    const { session, paths, store } = this.context;
    const { name, owner } = this.request;
    const attemptId = attemptIdOf();
    try {
      const [created] = await session.multi(limit, (ops) =>
        ops.create(
          paths.waiter(name, attemptId, this.spec),
          Buffer.from(owner),
          CreateMode.EPHEMERAL_SEQUENTIAL,
        ),
      );
      if (!created?.path) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      this.setQueued(created.path);
      this.joinedBehind = node && recordedHolder(node.data);
      this.ownerChecked = false;
      this.likelyGrant = false;
      return { kind: 'again' };
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) {
        // The name node was swept between our look and the create: make it again.
        store.forgetParent(name);
        return { kind: 'again' };
      }
      if (error instanceof DlmError && error.details.indeterminate) {
        store.orphanCleanup(name, attemptId);
      }
      throw error;
    }
  }

  /** The lock is already this owner's: refresh it (same token) and leave the queue. */
  private async refreshOwn(limit: Budget, holder: Current, mine: string): Promise<QueueStep> {
    const { store } = this.context;
    const { name } = this.request;
    const refreshed = await store.refresh(limit, name, holder, this.leaseTtlMs, (ops) =>
      ops.remove(mine, -1),
    );
    if (!refreshed) return { kind: 'again' };
    noteRemoved(this.here, mine);
    this.setQueued(undefined);
    if (refreshed.expired) {
      await store.endLease(limit, name, { ...holder, version: refreshed.version }, 'expired');
      return { kind: 'again' };
    }
    return this.grantOf(holder.token, holder.path);
  }

  /** The holder we slept on was deleted: take the lock if its end was the only write. */
  private takeOver(limit: Budget, mine: string, version: number): Promise<QueueStep | undefined> {
    // The end marker's reason is not known here: watchers that missed it fall back on what
    // they know themselves (or `expired`).
    return this.takeFromHead(limit, mine, { data: Buffer.alloc(0), version });
  }

  /**
   * Queued: the mode predicate over the queue (Curator's `getsTheLock`). Exclusive: sleep on
   * the entry ahead, or first, take the lock or sleep on its holders. Shared: sleep on the last
   * exclusive entry ahead; with none, take room beside shared holders, or sleep on them (and on
   * the entry ahead, whose leaving makes room too).
   */
  private async lookAt(limit: Budget, mine: string): Promise<QueueStep> {
    const slept = this.sleptOn;
    this.sleptOn = undefined;
    if (slept?.gone) {
      const taken = await this.takeOver(limit, mine, slept.version + 1);
      if (taken) return taken;
      this.likelyGrant = true;
    }
    const { node, children } = await this.readQueue(limit);
    const position = children?.waiters.indexOf(mine.slice(this.parent.length + 1)) ?? -1;
    if (!children || position < 0) {
      // Our node is gone (the session that held it expired): we are no longer queued.
      this.setQueued(undefined);
      return { kind: 'again' };
    }
    this.ahead =
      position <= AHEAD_MAX
        ? children.waiters.slice(0, position).map((waiter) => `${this.parent}/${waiter}`)
        : undefined;
    const ahead = aheadOf(children.waiters.slice(0, position));
    const blocker =
      this.spec.mode === 'exclusive' ? children.waiters[position - 1] : ahead.lastExclusive;
    if (blocker !== undefined) {
      if (!this.ownerChecked && children.holders.length) {
        const own = await this.ownLockOnce(limit, children, mine);
        if (own) return own;
      }
      return this.sleepOn(limit, blocker);
    }
    if (children.holders.length)
      return this.atHeadBehind(limit, mine, node, children, ahead.shared);
    // Free, but shared entries ahead of ours fill the room: wait for the nearest to be served.
    if (ahead.shared >= this.spec.limit)
      return this.sleepOn(limit, children.waiters[position - 1]!);
    return this.atHeadFree(limit, mine, node, children);
  }

  /** Sleeps until the waiter node `child` goes (it is watched). */
  private async sleepOn(limit: Budget, child: string): Promise<QueueStep> {
    const stat = await this.context.session.exists(limit, `${this.parent}/${child}`, this.onWatch);
    return stat ? { kind: 'predecessor' } : { kind: 'again' };
  }

  /**
   * The children come with the name node's version in the same reply: that version guards
   * the grant against anything granted after this read. When a grant is likely, the name
   * node's data (which the grant rewrites) is read in the same round trip, before.
   */
  private async readQueue(
    limit: Budget,
  ): Promise<{ node: NameNode | undefined; children: Children | undefined }> {
    const { store } = this.context;
    const { name } = this.request;
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
   * Once after joining: if the lock is already ours (granted to this owner through another
   * dlm server, whose reply was lost), waiting behind others for it would never end.
   */
  private async ownLockOnce(
    limit: Budget,
    children: Children,
    mine: string,
  ): Promise<QueueStep | undefined> {
    const { store } = this.context;
    const { name, owner, keyHash } = this.request;
    this.ownerChecked = true;
    const behind = this.joinedBehind;
    // Known without a read: a lease granted here, or the holder recorded when we joined.
    const candidates = children.holders.filter((child) => {
      const known =
        store.knownOwner(name, `${this.parent}/${child}`) ??
        (behind && child.startsWith(`${behind.attemptId}-`) ? behind.owner : undefined);
      return known === undefined || known === owner;
    });
    if (!candidates.length) return undefined;
    const holders = await store.readHolders(limit, name, { holders: candidates });
    const own = holders.find((holder) => isOwnLease(holder, owner, keyHash));
    if (!own) return undefined;
    const verdict = judge({ owner, keyHash }, this.spec, [{ holder: own, remainingMs: 0 }]);
    if (verdict.kind === 'conflict') return verdict;
    return this.refreshOwn(limit, own, mine);
  }

  /**
   * First among the entries that block us, behind holders: end those whose lease is over,
   * refresh our own, take room beside shared ones, or sleep on them (each is watched, with the
   * end that would let us in as the timer: no expiry is announced).
   */
  private async atHeadBehind(
    limit: Budget,
    mine: string,
    node: NameNode | undefined,
    children: Children,
    sharedAhead: number,
  ): Promise<QueueStep> {
    const { store } = this.context;
    const { name, owner, keyHash } = this.request;
    // Behind shared entries, at a semaphore's limit (by the node names): only the entry ahead
    // can take the next room, so watch it alone, not the holders (one wake per end, not one
    // per waiter); the first shared waiter watches the holders and their deadlines.
    const full =
      sharedAhead > 0 &&
      children.holders.every((child) => specOf(child).mode === 'shared') &&
      children.holders.length + sharedAhead >= this.spec.limit;
    const holders = await store.readHolders(limit, name, children, full ? undefined : this.onWatch);
    this.likelyGrant = true;
    const only =
      children.holders.length === 1 ? `${this.parent}/${children.holders[0]}` : undefined;
    // The end of the only holder frees the name: then only its end rewrote the name node.
    const freedByItsEnd = this.spec.mode === 'exclusive' || sharedAhead < this.spec.limit;
    if (!holders.length) {
      // Gone since the children were read. If it was persistent, its end was the name
      // node's next write (as when it goes while we sleep on it): try that version.
      if (only && freedByItsEnd && store.persistentHere(only)) {
        const taken = await this.takeOver(limit, mine, children.version + 1);
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
    const verdict = judge({ owner, keyHash }, this.spec, left, sharedAhead);
    if (verdict.kind === 'own') return this.refreshOwn(limit, verdict.holder, mine);
    if (verdict.kind === 'conflict') return verdict;
    if (verdict.kind === 'room') {
      if (holders.length !== children.holders.length) return { kind: 'again' };
      return this.atHeadFree(limit, mine, node, children);
    }
    if (sharedAhead > 0) {
      // A shared entry ahead that leaves (rather than being served) makes room too.
      const position = children.waiters.indexOf(mine.slice(this.parent.length + 1));
      const predecessor = children.waiters[position - 1]!;
      if (full) return this.sleepOn(limit, predecessor);
      const stat = await this.context.session.exists(
        limit,
        `${this.parent}/${predecessor}`,
        this.onWatch,
      );
      if (!stat) return { kind: 'again' };
    }
    const holder = holders[0]!;
    if (only && holders.length === 1 && holder.persistent && freedByItsEnd) {
      this.sleptOn = { path: only, version: children.version, gone: false };
    }
    return { kind: 'holder', ttlRemainingMs: Math.min(verdict.ttlRemainingMs, MAX_TIMER_MS) };
  }

  /**
   * At the head, and free: the grant rewrites the name node's data, read at the version the
   * children were read at (if it moved, something was granted or ended: look again).
   */
  private async atHeadFree(
    limit: Budget,
    mine: string,
    read: NameNode | undefined,
    children: Children,
  ): Promise<QueueStep> {
    const node = read ?? (await this.context.store.nameNode(limit, this.request.name));
    const taken =
      node && node.version === children.version
        ? await this.takeFromHead(limit, mine, node)
        : undefined;
    if (taken) return taken;
    this.likelyGrant = true;
    return { kind: 'again' };
  }
}
