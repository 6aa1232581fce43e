import { randomBytes } from 'node:crypto';
import { type AcquireRequest, type AcquireResult, DlmError, type Grant } from '@dlm/core';
import { Event, Exception } from 'node-zookeeper-client';
import { recordedHolder } from './zk-data.js';
import { type Current, isOwnLease, type LockStore, type NameNode } from './zk-locks.js';
import type { LockPaths } from './zk-paths.js';
import { type Budget, budget, CreateMode, isZkCode, type ZkSession } from './zk-session.js';

/** The outcome of one look at the queue: a grant, or what to sleep on until the next look. */
type Step =
  | { kind: 'granted'; grant: Grant }
  /** Look again at once (we just joined, our node is gone, or something changed under us). */
  | { kind: 'again' }
  /** Sleep until the predecessor's node goes (a watch on it is set). */
  | { kind: 'predecessor' }
  /** At the head: sleep until the holder's node changes (watched) or its lease runs out. */
  | { kind: 'lock'; ttlRemainingMs: number };

export interface QueueContext {
  session: ZkSession;
  paths: LockPaths;
  store: LockStore;
  commandTimeoutMs: number;
  minTtlMs: number;
  isClosed(): boolean;
  /** Called with every grant this queue makes (the backend's own bookkeeping). */
  onGrant(name: string, owner: string, path: string, token: bigint): void;
}

/**
 * The waiters' queue, as ZooKeeper's lock recipe builds it: each waiter creates an ephemeral
 * sequential node under the name node (so a waiter whose dlm server died leaves the queue with
 * its session); sequence numbers order the queue. A waiter watches only its predecessor's node
 * (a release wakes one waiter, not all); at the head it watches the holder's node, with the
 * holder's remaining lease on ZooKeeper's clock as the timer for an expiry nobody announces.
 *
 * The head takes the lock in one multi-op that creates the holder node, deletes its own waiter
 * node and rewrites the name node at the version read before it looked: if its waiter node is
 * gone (its session expired while it slept, so it is no longer queued) or anything else was
 * granted meanwhile, nothing happens and it looks again. The lease runs from that multi-op.
 */
export function fairQueue(context: QueueContext) {
  const { session, paths, store, commandTimeoutMs } = context;
  const sleepers = new Set<() => void>();
  const joining = new Map<string, Promise<void>>();
  /** Waiter nodes this backend has in each name's queue. */
  const queuedHere = new Map<string, number>();

  // Watches may not survive a lost session, and the session's waiter nodes do not: after a
  // reconnect or a new session, every waiter looks again.
  session.onState((state) => {
    if (state !== 'disconnected') wakeAll();
  });

  function wakeAll(): void {
    for (const wake of [...sleepers]) wake();
  }

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

  async function acquireQueued({
    name,
    owner,
    ttlMs,
    keyHash,
    signal,
  }: AcquireRequest & { signal: AbortSignal }): Promise<AcquireResult> {
    if (signal.aborted) return { granted: false };
    if (context.isClosed()) {
      throw new DlmError('UNAVAILABLE', 'acquire: the ZooKeeper backend is closed');
    }
    const turn = takeTurn(name);
    const parent = paths.parent(name);
    const leaseTtlMs = Math.max(ttlMs, context.minTtlMs);
    /** Our waiter node's path while we are queued (set through `setQueued`). */
    let myPath: string | undefined;
    const setQueued = (path: string | undefined) => {
      const count = (queuedHere.get(name) ?? 0) + (path ? 1 : 0) - (myPath ? 1 : 0);
      if (count > 0) queuedHere.set(name, count);
      else queuedHere.delete(name);
      myPath = path;
    };
    /** The holder the name node recorded when we joined: who it is, if it still holds. */
    let joinedBehind: { owner: string; attemptId: string } | undefined;
    let inFlight = false;
    let missed = false;
    let wake: () => void = () => {};
    let ttlRemainingMs: number | undefined;
    let ownerChecked = false;
    /**
     * The next look will probably grant (we are at the head, and slept on the holder): read the
     * name node's data (for the grant) together with the children, in one round trip.
     */
    let likelyGrant = false;
    // One function for every watch this waiter sets: ZooKeeper clients keep one registration
    // per function and path, so looking again does not pile up watchers.
    const onWatch = (event: Event) => {
      if (sleptOn && event.getType() === Event.NODE_DELETED && event.getPath() === sleptOn.path) {
        sleptOn.gone = true;
      }
      if (inFlight) missed = true;
      else wake();
    };
    /**
     * At the head, the persistent holder we sleep on, and the name node's version when we saw
     * it (in the same snapshot as the children). Such a holder only goes by an end, which is
     * the name node's next write: once its node is deleted, the name node at exactly the next
     * version means nothing else happened since — no grant, and we are still at the head (no
     * waiter queues ahead of one that was first) — so we take the lock at that version at
     * once, without reading again. Anything else in between fails the multi-op: look again.
     */
    let sleptOn: { path: string; version: number; gone: boolean } | undefined;

    const grantOf = (token: bigint, path: string): Step => {
      context.onGrant(name, owner, path, token);
      return { kind: 'granted', grant: { name, owner, token, ttlMs: leaseTtlMs } };
    };

    /**
     * Not queued: take the lock when nothing is under its name node (the uncontended case:
     * one read, one multi-op), else join the queue at once — a waiter's place is its arrival,
     * so everything else (our own lock again, an expired holder) is settled by `look`.
     */
    async function join(limit: Budget): Promise<Step> {
      await store.ensureParent(limit, name);
      // Others of ours already queue for it: it is neither free nor uncontended, so join the
      // queue without reading the name node first.
      const contended = (queuedHere.get(name) ?? 0) > 0;
      const node = contended ? undefined : await store.nameNode(limit, name);
      if (!node && !contended) {
        store.forgetParent(name);
        return { kind: 'again' };
      }
      if (node?.numChildren === 0) {
        const attemptId = randomBytes(8).toString('hex');
        const created = await store.createHolder(
          limit,
          name,
          node,
          owner,
          keyHash,
          leaseTtlMs,
          attemptId,
        );
        return created.kind === 'created'
          ? grantOf(created.token, created.path)
          : { kind: 'again' };
      }
      const attemptId = randomBytes(8).toString('hex');
      try {
        const [created] = await session.multi(limit, (ops) =>
          ops.create(
            paths.waiter(name, attemptId),
            Buffer.from(owner),
            CreateMode.EPHEMERAL_SEQUENTIAL,
          ),
        );
        if (!created?.path) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
        setQueued(created.path);
        joinedBehind = node && recordedHolder(node.data);
        ownerChecked = false;
        likelyGrant = false;
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
    async function refreshOwn(limit: Budget, holder: Current, mine: string): Promise<Step> {
      const refreshed = await store.refresh(limit, name, holder, leaseTtlMs, (ops) =>
        ops.remove(mine, -1),
      );
      if (!refreshed) return { kind: 'again' };
      setQueued(undefined);
      if (refreshed.expired) {
        await store.endLease(limit, name, { ...holder, version: refreshed.version }, 'expired');
        return { kind: 'again' };
      }
      return grantOf(holder.token, holder.path);
    }

    /** Queued: sleep on our predecessor, or at the head take the lock or sleep on its holder. */
    /** The holder we slept on was deleted: take the lock if its end was the only write. */
    async function takeOver(
      limit: Budget,
      mine: string,
      version: number,
    ): Promise<Step | undefined> {
      const attemptId = randomBytes(8).toString('hex');
      const created = await store.createHolder(
        limit,
        name,
        // The end marker's reason is not known here: watchers that missed it fall back on
        // what they know themselves (or `expired`).
        { data: Buffer.alloc(0), version },
        owner,
        keyHash,
        leaseTtlMs,
        attemptId,
        (ops) => ops.remove(mine, -1),
      );
      if (created.kind !== 'created') return undefined;
      setQueued(undefined);
      return grantOf(created.token, created.path);
    }

    async function look(limit: Budget, mine: string): Promise<Step> {
      const slept = sleptOn;
      sleptOn = undefined;
      if (slept?.gone) {
        const taken = await takeOver(limit, mine, slept.version + 1);
        if (taken) return taken;
        likelyGrant = true;
      }
      // The children come with the name node's version in the same reply: that version guards
      // the grant below against anything granted after this read. When a grant is likely, the
      // name node's data (which the grant rewrites) is read in the same round trip, before.
      const expectGrant = likelyGrant;
      likelyGrant = false;
      let node: NameNode | undefined;
      let children: Awaited<ReturnType<LockStore['childrenOf']>>;
      if (expectGrant) {
        [node, children] = await Promise.all([
          store.nameNode(limit, name),
          store.childrenOf(limit, name),
        ]);
      } else {
        children = await store.childrenOf(limit, name);
      }
      const myName = mine.slice(parent.length + 1);
      const position = children?.waiters.indexOf(myName) ?? -1;
      if (!children || position < 0) {
        // Our node is gone (the session that held it expired): we are no longer queued.
        setQueued(undefined);
        return { kind: 'again' };
      }
      if (!ownerChecked && position > 0 && children.holders[0]) {
        // Once after joining: if the lock is already ours (granted to this owner through another
        // dlm server, whose reply was lost), waiting behind others for it would never end.
        ownerChecked = true;
        const holderName = children.holders[0];
        const holderPath = `${parent}/${holderName}`;
        // Known without a read: a lease granted here, or the holder recorded when we joined.
        const knownOwner =
          store.knownOwner(name, holderPath) ??
          (joinedBehind && holderName.startsWith(`${joinedBehind.attemptId}-`)
            ? joinedBehind.owner
            : undefined);
        if (knownOwner === undefined || knownOwner === owner) {
          const holder = await store.readHolder(limit, holderPath);
          if (holder && isOwnLease(holder, owner, keyHash)) return refreshOwn(limit, holder, mine);
        }
      }
      if (position > 0) {
        const predecessor = `${parent}/${children.waiters[position - 1]}`;
        const stat = await session.exists(limit, predecessor, onWatch);
        return stat ? { kind: 'predecessor' } : { kind: 'again' };
      }
      const holderName = children.holders[0];
      if (holderName) {
        const holderPath = `${parent}/${holderName}`;
        const holder = await store.readHolder(limit, holderPath, onWatch);
        likelyGrant = true;
        if (!holder) {
          // Gone since the children were read. If it was persistent, its end was the name
          // node's next write (as when it goes while we sleep on it): try that version.
          if (store.persistentHere(holderPath)) {
            const taken = await takeOver(limit, mine, children.version + 1);
            if (taken) return taken;
          }
          return { kind: 'again' };
        }
        if (isOwnLease(holder, owner, keyHash)) return refreshOwn(limit, holder, mine);
        const left = await store.leaseLeft(limit, holder);
        if (left.expired) {
          await store.endLease(limit, name, holder, 'expired');
          return { kind: 'again' };
        }
        if (holder.persistent) {
          sleptOn = { path: holderPath, version: children.version, gone: false };
        }
        ttlRemainingMs = Math.min(left.remainingMs, 2 ** 31 - 1);
        return { kind: 'lock', ttlRemainingMs };
      }
      // At the head, and free: the grant rewrites the name node's data, read at the version the
      // children were read at (if it moved, something was granted or ended: look again).
      node ??= await store.nameNode(limit, name);
      if (!node || node.version !== children.version) {
        likelyGrant = true;
        return { kind: 'again' };
      }
      const attemptId = randomBytes(8).toString('hex');
      const created = await store.createHolder(
        limit,
        name,
        node,
        owner,
        keyHash,
        leaseTtlMs,
        attemptId,
        (ops) => ops.remove(mine, -1),
      );
      if (created.kind !== 'created') {
        likelyGrant = true;
        return { kind: 'again' };
      }
      setQueued(undefined);
      return grantOf(created.token, created.path);
    }

    async function step(): Promise<Step> {
      if (myPath !== undefined) return look(budget('acquire', commandTimeoutMs), myPath);
      await turn.ready;
      try {
        return await join(budget('acquire', commandTimeoutMs));
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
        let next: Step;
        try {
          next = await step();
        } finally {
          inFlight = false;
        }
        // Granted as the wait ended: core hands the grant back, since nobody will use it.
        if (next.kind === 'granted') return { granted: true, grant: next.grant };
        if (next.kind === 'again' || missed || signal.aborted) continue;
        const sleptOn = next;
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
          // Nobody announces an expiry: look again when the holder's lease should be over.
          if (sleptOn.kind === 'lock')
            timer = setTimeout(done, Math.min(sleptOn.ttlRemainingMs + 50, 2 ** 31 - 1));
          void aborted.then(done);
        });
        if (context.isClosed()) {
          throw new DlmError('UNAVAILABLE', 'acquire: the ZooKeeper backend is closed');
        }
      }
      return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
    } finally {
      turn.done();
      if (myPath !== undefined) {
        const path = myPath;
        setQueued(undefined);
        await store
          .removeQuietly(budget('dequeue', commandTimeoutMs), path)
          .catch(() => store.removeLater(path));
      }
    }
  }

  return { acquireQueued, wakeAll };
}
