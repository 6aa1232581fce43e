import { randomBytes } from 'node:crypto';
import { type AcquireRequest, type AcquireResult, DlmError, type Grant } from '@dlm/core';
import { Exception } from 'node-zookeeper-client';
import type { Current, LockStore } from './zk-locks.js';
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
    signal,
  }: AcquireRequest & { signal: AbortSignal }): Promise<AcquireResult> {
    if (signal.aborted) return { granted: false };
    if (context.isClosed()) {
      throw new DlmError('UNAVAILABLE', 'acquire: the ZooKeeper backend is closed');
    }
    const turn = takeTurn(name);
    const parent = paths.parent(name);
    const leaseTtlMs = Math.max(ttlMs, context.minTtlMs);
    /** Our waiter node's path while we are queued. */
    let myPath: string | undefined;
    let inFlight = false;
    let missed = false;
    let wake: () => void = () => {};
    let ttlRemainingMs: number | undefined;
    let ownerChecked = false;
    // One function for every watch this waiter sets: ZooKeeper clients keep one registration
    // per function and path, so looking again does not pile up watchers.
    const onWatch = () => {
      if (inFlight) missed = true;
      else wake();
    };

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
      const node = await store.nameNode(limit, name);
      if (!node) {
        store.forgetParent(name);
        return { kind: 'again' };
      }
      if (node.numChildren === 0) {
        const attemptId = randomBytes(8).toString('hex');
        const created = await store.createHolder(limit, name, node, owner, leaseTtlMs, attemptId);
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
        myPath = created.path;
        ownerChecked = false;
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
      const refreshed = await store.refresh(limit, holder, leaseTtlMs, (ops) =>
        ops.remove(mine, -1),
      );
      if (!refreshed) return { kind: 'again' };
      myPath = undefined;
      if (refreshed.expired) {
        await store.endLease(limit, name, { ...holder, version: refreshed.version }, 'expired');
        return { kind: 'again' };
      }
      return grantOf(holder.token, holder.path);
    }

    /** Queued: sleep on our predecessor, or at the head take the lock or sleep on its holder. */
    async function look(limit: Budget, mine: string): Promise<Step> {
      // The name node first: its version guards the grant below against anything granted
      // after this read.
      const node = await store.nameNode(limit, name);
      const children = node && (await store.childrenOf(limit, name));
      const myName = mine.slice(parent.length + 1);
      const position = children?.waiters.indexOf(myName) ?? -1;
      if (!node || !children || position < 0) {
        // Our node is gone (the session that held it expired): we are no longer queued.
        myPath = undefined;
        return { kind: 'again' };
      }
      if (!ownerChecked && position > 0 && children.holders[0]) {
        // Once after joining: if the lock is already ours (granted to this owner through another
        // dlm server, whose reply was lost), waiting behind others for it would never end.
        ownerChecked = true;
        const holder = await store.readHolder(limit, `${parent}/${children.holders[0]}`);
        if (holder?.owner === owner) return refreshOwn(limit, holder, mine);
      }
      if (position > 0) {
        const predecessor = `${parent}/${children.waiters[position - 1]}`;
        const stat = await session.exists(limit, predecessor, onWatch);
        return stat ? { kind: 'predecessor' } : { kind: 'again' };
      }
      const holderName = children.holders[0];
      if (holderName) {
        const holder = await store.readHolder(limit, `${parent}/${holderName}`, onWatch);
        if (!holder) return { kind: 'again' };
        if (holder.owner === owner) return refreshOwn(limit, holder, mine);
        const nowMs = await store.zkNow(limit);
        const expiresAt = holder.mtimeMs + holder.ttlMs;
        if (expiresAt <= nowMs) {
          await store.endLease(limit, name, holder, 'expired');
          return { kind: 'again' };
        }
        ttlRemainingMs = Math.min(expiresAt - nowMs, 2 ** 31 - 1);
        return { kind: 'lock', ttlRemainingMs };
      }
      const attemptId = randomBytes(8).toString('hex');
      const created = await store.createHolder(
        limit,
        name,
        node,
        owner,
        leaseTtlMs,
        attemptId,
        (ops) => ops.remove(mine, -1),
      );
      if (created.kind !== 'created') return { kind: 'again' };
      myPath = undefined;
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
        await store
          .removeQuietly(budget('dequeue', commandTimeoutMs), path)
          .catch(() => store.removeLater(path));
      }
    }
  }

  return { acquireQueued, wakeAll };
}
