import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type BackendQueue,
  type Clock,
  DlmError,
  decideGrant,
  type QueueDriver,
  type QueueStep,
  type QueueWaiter,
  queueWaits,
  systemClock,
} from '@dlm/core';
import { type Event, Exception } from 'node-zookeeper-client';
import {
  AHEAD_MAX,
  HandOverSlot,
  type HandOverWaiter,
  handOver,
  RemovedNodes,
} from './zk-hand-over.js';
import { type HeadWaiter, QueueHead } from './zk-holders.js';
import type { Current, LockStore, NameNode } from './zk-locks.js';
import { aheadOfWaiters, namedHolders, specOfRequest } from './zk-modes.js';
import type { EntrySpec, LockPaths } from './zk-paths.js';
import { countWaiters, QueuePlace } from './zk-queue-places.js';
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
  /** The wait loop's timers and its clock. Default: the system's. */
  clock?: Clock;
}

/**
 * ZooKeeper's queue driver, as its lock recipe builds the queue: each waiter creates an ephemeral
 * sequential node under the name node (so a waiter whose dlm server died leaves the queue with
 * its session); sequence numbers order the queue, and each node's name records its mode and
 * limit. Core's wait loop runs over it; the grant rule is core's, decided on the node names
 * first (an entry ahead that must go first is slept on without reading a holder) and on the
 * holders' data at the head. A waiter watches only what it sleeps on: the entry ahead, or at
 * the head the holders, with the holder's remaining lease on ZooKeeper's clock as the timer for
 * an expiry nobody announces.
 *
 * The head takes the lock in one multi-op that creates the holder node, deletes its own waiter
 * node and rewrites the name node at the version read before it looked: if its waiter node is
 * gone (its session expired while it slept) or anything else was granted meanwhile, nothing
 * happens and it looks again. A release of a lease granted here may hand the lock over to this
 * backend's head waiter in its own multi-op (zk-hand-over.ts).
 */
export function zkQueue(context: QueueContext) {
  const clock = context.clock ?? systemClock;
  const waits = queueWaits();
  const removed = new RemovedNodes();
  const queue: BackendQueue = {
    clock,
    // Nobody announces an expiry: look again just after the holder's lease should be over.
    expirySlackMs: 50,
    isClosed: context.isClosed,
    attach: waits.attach,
    driver: (request, waiter) => {
      const others = () => waits.drivers(request.name).some((other) => other.entry() !== undefined);
      return new ZkWaiter(context, clock, removed, request, waiter, others);
    },
    count: (name) => countWaiters(context, name),
  };
  // Watches may not survive a lost session, and the session's waiter nodes do not: after a
  // reconnect or a new session, every waiter looks again.
  context.session.onState((state) => {
    if (state !== 'disconnected') waits.resync();
  });
  return {
    queue,
    /** See `handOver` (zk-hand-over.ts): false when nothing was applied. */
    handOver: (limit: Budget, name: string, lease: Current) =>
      handOver(waits.drivers(name) as ZkWaiter[], removed, limit, lease),
    close: () => waits.close(),
  };
}

const attemptIdOf = () => randomBytes(8).toString('hex');

/** One queued acquire: its waiter node, and what it learnt of the holder. */
class ZkWaiter implements QueueDriver, HandOverWaiter, HeadWaiter {
  readonly parent: string;
  readonly leaseTtlMs: number;
  readonly spec: EntrySpec;
  readonly slot: HandOverSlot;
  readonly store: LockStore;
  private readonly head = new QueueHead(this);
  private readonly place: QueuePlace;
  /** Our waiter node's path while we are queued. */
  private myPath: string | undefined;

  constructor(
    private readonly context: QueueContext,
    clock: Clock,
    private readonly removed: RemovedNodes,
    readonly request: AcquireRequest,
    private readonly waiter: QueueWaiter,
    /** Whether another wait of this backend is queued for the name. */
    private readonly othersQueued: () => boolean,
  ) {
    this.store = context.store;
    this.parent = context.paths.parent(request.name);
    this.leaseTtlMs = Math.max(request.ttlMs, context.minTtlMs);
    this.spec = specOfRequest(request);
    this.place = new QueuePlace(context.session, context.commandTimeoutMs);
    const { owner, keyHash } = request;
    const lockDelayMs = request.lockDelayMs ?? 0;
    const to = { owner, keyHash, ttlMs: this.leaseTtlMs, spec: this.spec, lockDelayMs };
    this.slot = new HandOverSlot(context.store, request, to, context.commandTimeoutMs, {
      now: () => clock.now(),
      left: (path) => this.gone(path),
      woken: () => waiter.changed(),
      granted: (token, path, sentAt) => this.grantOf(token, path, sentAt),
    });
  }

  // One function for every watch this waiter sets: ZooKeeper clients keep one registration
  // per function and path, so looking again does not pile up watchers.
  readonly onWatch = (event: Event) => {
    this.head.watched(event);
    this.waiter.changed();
  };

  entry(): string | undefined {
    return this.myPath;
  }

  /** My place among the waiter nodes (zk-queue-places.ts). */
  position(moved: () => void): Promise<number | undefined> {
    return this.place.read(this.parent, this.myPath, moved);
  }

  stop(): void {
    // ZooKeeper watches are one-shot and cannot be taken back; the loop ignores a late one.
    this.slot.stopped = true;
    this.slot.dropUncollected();
    this.place.stop();
  }

  async leave(path: string): Promise<void> {
    await this.context.store.removeQuietly(budget('dequeue', this.context.commandTimeoutMs), path);
    this.gone(path);
  }

  join(): Promise<QueueStep> {
    return this.joinQueue(this.budget());
  }

  async look(): Promise<QueueStep> {
    const { slot } = this;
    // A release handing us the lock wakes us (its deletion of the holder we sleep on) before
    // its reply: wait for its outcome rather than try to take the lock ourselves.
    if (slot.offer) await slot.offer.catch(() => false);
    let step: QueueStep | undefined;
    try {
      if (!slot.taken) step = await this.lookAt(this.budget(), this.myPath!);
    } catch (error) {
      if (!slot.offer && !slot.taken) throw error;
    }
    // What a look saw while a release was handing us the lock (our node gone, the lock held)
    // is that release's doing: its outcome decides.
    if (slot.offer) await slot.offer.catch(() => false);
    return slot.collect() ?? step ?? { kind: 'again' };
  }

  private budget(): Budget {
    return budget('acquire', this.context.commandTimeoutMs);
  }

  /** Our waiter node `path` is gone (we left, took the lock, or were handed it). */
  gone(path: string): void {
    this.removed.note(path);
    if (this.myPath === path) this.myPath = undefined;
    this.slot.ahead = undefined;
  }

  grantOf(token: bigint, path: string, sentAt?: number): QueueStep {
    const { name, owner } = this.request;
    this.context.onGrant(name, owner, path, token);
    return { kind: 'granted', grant: { name, owner, token, ttlMs: this.leaseTtlMs }, sentAt };
  }

  /** Takes the lock at `version` of the name node, leaving the queue in the same multi-op. */
  async take(limit: Budget, node: Pick<NameNode, 'data' | 'version'>, mine?: string) {
    // A release is handing us the lock: the look ends, and waits for it (see `look`).
    if (mine && (this.slot.offer || this.slot.taken)) return undefined;
    const { name, owner, keyHash } = this.request;
    const created = await this.context.store.createHolder(
      limit,
      name,
      node,
      owner,
      keyHash,
      this.leaseTtlMs,
      attemptIdOf(),
      mine ? (ops) => ops.remove(mine, -1) : undefined,
      this.spec,
      this.request.lockDelayMs ?? 0,
    );
    if (created.kind !== 'created') return undefined;
    if (mine) this.gone(mine);
    return this.grantOf(created.token, created.path);
  }

  /**
   * Not queued: take the lock when nothing is under its name node (the uncontended case: one
   * read, one multi-op), else join the queue at once — a waiter's place is its arrival, so
   * everything else (our own lock again, an expired holder) is settled by `look`.
   */
  private async joinQueue(limit: Budget): Promise<QueueStep> {
    const { store, session, paths } = this.context;
    const { name, owner } = this.request;
    await store.ensureParent(limit, name);
    // Others of ours already queue for it: neither free nor uncontended, so join at once.
    const contended = this.othersQueued();
    const node = contended ? undefined : await store.nameNode(limit, name);
    if (!node && !contended) {
      store.forgetParent(name);
      return { kind: 'again' };
    }
    // Free and uncontended: take it, unless it is in its lock-delay (then queue, and the look
    // sleeps until the delay is over: `QueueHead.free`).
    if (node?.numChildren === 0 && (await store.delayLeft(limit, node)) === 0) {
      return (await this.take(limit, node)) ?? { kind: 'again' };
    }
    const attemptId = attemptIdOf();
    try {
      const waiterPath = paths.waiter(name, attemptId, this.spec);
      const [created] = await session.multi(limit, (ops) =>
        ops.create(waiterPath, Buffer.from(owner), CreateMode.EPHEMERAL_SEQUENTIAL),
      );
      if (!created?.path) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      this.myPath = created.path;
      this.head.joined(node);
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

  /** Queued: the grant rule on what the node names tell, then on the holders at the head. */
  private async lookAt(limit: Budget, mine: string): Promise<QueueStep> {
    const { head } = this;
    const taken = await head.takeOver(limit, mine);
    if (taken) return taken;
    const { node, children } = await head.readQueue(limit);
    const position = children?.waiters.indexOf(mine.slice(this.parent.length + 1)) ?? -1;
    if (!children || position < 0) {
      // Our node is gone (the session that held it expired): we are no longer queued.
      this.myPath = undefined;
      return { kind: 'again' };
    }
    const waitersAhead = children.waiters.slice(0, position);
    this.slot.ahead =
      position <= AHEAD_MAX ? waitersAhead.map((waiter) => `${this.parent}/${waiter}`) : undefined;
    const ahead = aheadOfWaiters(this.spec, waitersAhead);
    // An entry ahead that must go first is slept on without reading the holders.
    const named = decideGrant(this.spec, namedHolders(children.holders), ahead);
    if (named.kind === 'wait' && named.on === 'entry') {
      if (!head.ownerChecked && children.holders.length) {
        const own = await head.ownLockOnce(limit, children, mine, ahead);
        if (own) return own;
      }
      const entry =
        named.entry === 'nearest' ? waitersAhead.at(-1)! : waitersAhead[ahead.lastBlocking!]!;
      return this.sleepOn(limit, entry);
    }
    if (children.holders.length) return head.behind(limit, mine, node, children, ahead);
    return head.free(limit, mine, node, children);
  }

  /** Sleeps until the waiter node `child` goes (it is watched). */
  private async sleepOn(limit: Budget, child: string): Promise<QueueStep> {
    const stat = await this.context.session.exists(limit, `${this.parent}/${child}`, this.onWatch);
    return stat ? { kind: 'predecessor' } : { kind: 'again' };
  }
}
