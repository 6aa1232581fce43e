import { DlmError } from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import { holders, type LockPaths, waiters } from './zk-paths.js';
import {
  type Budget,
  budget,
  CreateMode,
  isZkCode,
  type Ops,
  type ZkSession,
} from './zk-session.js';
import { type Holder, leaseData, parseData, zxid } from './zk-watch.js';

/** The holder node of a name, as read: its lease runs until `mtimeMs + ttlMs` on ZooKeeper's clock. */
export interface Current extends Holder {
  version: number;
  mtimeMs: number;
  ttlMs: number;
}

/** A name node: its end marker, and the data version that guards grants. */
export interface NameNode {
  data: Buffer;
  version: number;
  numChildren: number;
  mtimeMs: number;
}

export type EndReason = 'released' | 'revoked' | 'expired';

export type CreateOutcome =
  | { kind: 'created'; path: string; token: bigint; nowMs: number }
  /** The name node changed since it was read (another grant or an end): look again. */
  | { kind: 'conflict' }
  /** A node the create needs is gone (the name node was swept, our waiter node expired). */
  | { kind: 'missing' };

export const mtimeOf = (stat: Stat) => Number(stat.mtime.readBigInt64BE(0));

export interface LockStoreOptions {
  commandTimeoutMs: number;
  /** Holder nodes die with the session that created them. */
  ephemeral: boolean;
  isClosed(): boolean;
  /** Told the token and reason of every lease this store ends (for the watch's events). */
  onEnd(token: bigint, reason: EndReason): void;
}

/**
 * The operations on one name's nodes that tryAcquire, the queue and the sweeper share. Each is
 * one ZooKeeper request or one multi-op; versions make every write conditional on what was read.
 */
export function lockStore(session: ZkSession, paths: LockPaths, options: LockStoreOptions) {
  const knownParents = new Set<string>();
  let rootsReady = false;

  async function ensureRoots(limit: Budget): Promise<void> {
    if (rootsReady) return;
    await session.mkdirp(limit, paths.clock);
    await session.mkdirp(limit, paths.locks);
    rootsReady = true;
  }

  async function ensureParent(limit: Budget, name: string): Promise<void> {
    const parent = paths.parent(name);
    if (knownParents.has(parent)) return;
    await ensureRoots(limit);
    await session.mkdirp(limit, parent);
    knownParents.add(parent);
  }

  /** A node we made is gone (swept, or deleted by hand): make it again next time. */
  function forgetParent(name: string): void {
    knownParents.delete(paths.parent(name));
    rootsReady = false;
  }

  /** ZooKeeper's time now: the mtime of a write to the clock node. */
  async function zkNow(limit: Budget): Promise<number> {
    try {
      return mtimeOf(await session.setData(limit, paths.clock, Buffer.alloc(0)));
    } catch (error) {
      // Touching the clock changes nothing anyone reads: a lost reply is no ambiguity.
      if (error instanceof DlmError)
        throw new DlmError('UNAVAILABLE', error.message, { cause: error });
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
      rootsReady = false;
      await ensureRoots(limit);
      return mtimeOf(await session.setData(limit, paths.clock, Buffer.alloc(0)));
    }
  }

  async function nameNode(limit: Budget, name: string): Promise<NameNode | undefined> {
    try {
      const { data, stat } = await session.getData(limit, paths.parent(name));
      return { data, version: stat.version, numChildren: stat.numChildren, mtimeMs: mtimeOf(stat) };
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  async function childrenOf(
    limit: Budget,
    name: string,
  ): Promise<{ holders: string[]; waiters: string[]; all: string[] } | undefined> {
    try {
      const { children } = await session.getChildren(limit, paths.parent(name));
      return { holders: holders(children), waiters: waiters(children), all: children };
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /** Reads a holder node (leaving `watcher` on it when given); undefined once it is gone. */
  async function readHolder(
    limit: Budget,
    path: string,
    watcher?: () => void,
  ): Promise<Current | undefined> {
    try {
      const { data, stat } = await session.getData(limit, path, watcher);
      const lease = parseData(data);
      return {
        path,
        token: zxid(stat.czxid),
        owner: lease?.owner ?? '',
        version: stat.version,
        mtimeMs: mtimeOf(stat),
        // A node without a readable lease (written by something else) never expires by TTL.
        ttlMs: lease?.ttlMs ?? Number.POSITIVE_INFINITY,
      };
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /** The holder of `name` and its lease, or undefined when free. */
  async function currentHolder(limit: Budget, name: string): Promise<Current | undefined> {
    for (;;) {
      const children = await childrenOf(limit, name);
      const lowest = children?.holders[0];
      if (!lowest) return undefined;
      const holder = await readHolder(limit, `${paths.parent(name)}/${lowest}`);
      if (holder) return holder;
    }
  }

  /**
   * Deletes `holder` (version-checked, so an extension or a takeover in between wins) and
   * records why in the name node's end marker, in one multi-op. False when it had changed.
   */
  async function endLease(
    limit: Budget,
    name: string,
    holder: Current,
    reason: EndReason,
  ): Promise<boolean> {
    options.onEnd(holder.token, reason);
    try {
      await session.multi(limit, (ops) =>
        ops
          .setData(paths.parent(name), Buffer.from(`${reason}:${holder.token}`), -1)
          .remove(holder.path, holder.version),
      );
      return true;
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        return false;
      }
      throw error;
    }
  }

  /**
   * Creates a holder node for `owner`, in one multi-op with: a rewrite of the name node at the
   * version read in `node` (so that no other grant or end happened since, and none can happen
   * concurrently: this is what keeps holders unique), a touch of the clock node (every op of a
   * multi shares one zxid, so the clock's new mzxid is the holder's czxid, the token; its
   * mtime is ZooKeeper's time of the grant), and `extra` (a waiter leaving the queue).
   * The name node keeps its data: watchers may still have to read the last end marker.
   */
  async function createHolder(
    limit: Budget,
    name: string,
    node: NameNode,
    owner: string,
    ttlMs: number,
    attemptId: string,
    extra: (ops: Ops) => Ops = (ops) => ops,
  ): Promise<CreateOutcome> {
    const mode = options.ephemeral
      ? CreateMode.EPHEMERAL_SEQUENTIAL
      : CreateMode.PERSISTENT_SEQUENTIAL;
    try {
      const results = await session.multi(limit, (ops) =>
        extra(
          ops
            .setData(paths.parent(name), node.data, node.version)
            .create(paths.holder(name, attemptId), leaseData(owner, ttlMs), mode)
            .setData(paths.clock, Buffer.alloc(0), -1),
        ),
      );
      const path = results[1]?.path;
      const stat = results[2]?.stat;
      if (!path || !stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      return { kind: 'created', path, token: zxid(stat.mzxid), nowMs: mtimeOf(stat) };
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION)) return { kind: 'conflict' };
      if (isZkCode(error, Exception.NO_NODE)) {
        forgetParent(name);
        return { kind: 'missing' };
      }
      if (error instanceof DlmError && error.details.indeterminate) orphanCleanup(name, attemptId);
      throw error;
    }
  }

  /**
   * Rewrites a holder's lease (version-checked), with `extra` ops in the same multi-op. The
   * write's own mtime is ZooKeeper's time of it: when the old lease had already run out by
   * then, it was no longer there to refresh, and the caller must end it instead. Undefined when
   * the holder changed meanwhile.
   */
  async function refresh(
    limit: Budget,
    holder: Current,
    ttlMs: number,
    extra: (ops: Ops) => Ops = (ops) => ops,
  ): Promise<{ expired: boolean; version: number } | undefined> {
    try {
      const results = await session.multi(limit, (ops) =>
        extra(ops.setData(holder.path, leaseData(holder.owner, ttlMs), holder.version)),
      );
      const stat = results[0]?.stat;
      if (!stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      return { expired: holder.mtimeMs + holder.ttlMs <= mtimeOf(stat), version: stat.version };
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        return undefined;
      }
      throw error;
    }
  }

  async function removeQuietly(limit: Budget, path: string): Promise<void> {
    try {
      await session.multi(limit, (ops) => ops.remove(path, -1));
    } catch (error) {
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
    }
  }

  /** Removes a node in the background until it is gone (or the backend closes). */
  function removeLater(path: string): void {
    let delayMs = 250;
    const attempt = () => {
      if (options.isClosed()) return;
      removeQuietly(budget('cleanup', options.commandTimeoutMs), path).catch(() => {
        delayMs = Math.min(delayMs * 2, 5_000);
        setTimeout(attempt, delayMs).unref();
      });
    };
    attempt();
  }

  /**
   * A create whose reply was lost may have happened: a holder node would hold the lock for
   * nobody until its lease ran out, a waiter node would block the queue while our session
   * lives. Once the session answers again, find it by the attempt id and delete it — a holder
   * only if nobody adopted it meanwhile (a retry by the same owner refreshes it, moving its
   * version past 0).
   */
  function orphanCleanup(name: string, attemptId: string): void {
    const attempt = async () => {
      const limit = budget('cleanup', options.commandTimeoutMs);
      const children = await childrenOf(limit, name);
      for (const child of children?.all ?? []) {
        if (!child.startsWith(`${attemptId}-`)) continue;
        const path = `${paths.parent(name)}/${child}`;
        if (waiters([child]).length) {
          await removeQuietly(limit, path);
          continue;
        }
        const holder = await readHolder(limit, path);
        if (holder?.version === 0) await endLease(limit, name, holder, 'expired');
      }
    };
    const retry = (tries: number) => {
      if (options.isClosed() || tries === 0) return;
      attempt().catch((error: unknown) => {
        if (error instanceof DlmError) {
          setTimeout(() => retry(tries - 1), options.commandTimeoutMs).unref();
        }
      });
    };
    retry(10);
  }

  return {
    ensureRoots,
    ensureParent,
    forgetParent,
    zkNow,
    nameNode,
    childrenOf,
    readHolder,
    currentHolder,
    endLease,
    createHolder,
    refresh,
    removeQuietly,
    removeLater,
    orphanCleanup,
  };
}

export type LockStore = ReturnType<typeof lockStore>;
