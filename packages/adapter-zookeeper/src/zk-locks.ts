import { DlmError } from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import {
  type EndReason,
  endData,
  grantData,
  leaseData,
  mtimeOf,
  parseData,
  zxid,
} from './zk-data.js';
import { holders, type LockPaths, waiters } from './zk-paths.js';
import {
  type Budget,
  budget,
  CreateMode,
  isZkCode,
  type Ops,
  type Watcher,
  type ZkSession,
} from './zk-session.js';
import type { Holder } from './zk-watch.js';

/** The holder node of a name, as read: its lease runs until `mtimeMs + ttlMs` on ZooKeeper's clock. */
export interface Current extends Holder {
  version: number;
  /** The lease key's hash as of `version` (never reported beyond this adapter). */
  keyHash: string | undefined;
  mtimeMs: number;
  ttlMs: number;
  /**
   * The node is persistent: it only goes away by an end, which rewrites the name node (an
   * ephemeral one also goes with its session, without that write). Undefined: not read.
   */
  persistent?: boolean;
}

/** A name node: its end marker, and the data version that guards grants. */
export interface NameNode {
  data: Buffer;
  version: number;
  numChildren: number;
  mtimeMs: number;
}

export type { EndReason };

export type CreateOutcome =
  | { kind: 'created'; path: string; token: bigint; nowMs: number }
  /** The name node changed since it was read (another grant or an end): look again. */
  | { kind: 'conflict' }
  /** A node the create needs is gone (the name node was swept, our waiter node expired). */
  | { kind: 'missing' };

export { mtimeOf };

/** A name node's children, with the name node's data version at the same moment. */
export interface Children {
  holders: string[];
  waiters: string[];
  all: string[];
  version: number;
}

/**
 * How close to its end (by the estimate of ZooKeeper's clock) a lease must be before a
 * decision about it asks ZooKeeper for the exact time.
 */
const ESTIMATE_MARGIN_MS = 500;
/** The oldest clock sample an estimate is made from. */
const SAMPLE_MAX_AGE_MS = 10_000;
/** The most leases granted here that are remembered for a release or extend in one step. */
const OWN_LEASES_MAX = 10_000;

export interface LockStoreOptions {
  commandTimeoutMs: number;
  /** Holder nodes die with the session that created them. */
  ephemeral: boolean;
  isClosed(): boolean;
  /** Told the token and reason of every lease this store ends (for the watch's events). */
  onEnd(token: bigint, reason: EndReason): void;
  /** A name-node read may leave the watch of `name` armed: its watcher, if it wants one. */
  claimWatch?(name: string): (() => void) | undefined;
  /** The result of a read made with that watcher (undefined: it failed or found no node). */
  claimed?(name: string, watcher: () => void, read: { data: Buffer; stat: Stat } | undefined): void;
  /** A write on `name`'s nodes starts (+1) or ends (-1): its own watch events can wait. */
  onWrite?(name: string, delta: 1 | -1): void;
}

/**
 * The operations on one name's nodes that tryAcquire, the queue and the sweeper share. Each is
 * one ZooKeeper request or one multi-op; versions make every write conditional on what was read.
 */
export function lockStore(session: ZkSession, paths: LockPaths, options: LockStoreOptions) {
  const knownParents = new Set<string>();
  let rootsReady = false;
  /**
   * Leases this store granted or refreshed, by name, as they were after that write: a release
   * or an extend by their token is then one multi-op on the known path and version (any change
   * made elsewhere fails it, and the caller looks again).
   */
  const ownLeases = new Map<string, Current>();
  /** Persistent holder nodes this store created lately (whether or not they still exist). */
  const createdHere = new Set<string>();
  /** ZooKeeper's time of our last write, and our monotonic time when its reply came. */
  let clockSample: { zkMs: number; localMs: number } | undefined;

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

  function noteClock(stat: Stat | undefined): void {
    if (stat) clockSample = { zkMs: mtimeOf(stat), localMs: performance.now() };
  }

  /** ZooKeeper's time now: the mtime of a write to the clock node. */
  async function zkNow(limit: Budget): Promise<number> {
    let stat: Stat;
    try {
      stat = await session.setData(limit, paths.clock, Buffer.alloc(0));
    } catch (error) {
      // Touching the clock changes nothing anyone reads: a lost reply is no ambiguity.
      if (error instanceof DlmError)
        throw new DlmError('UNAVAILABLE', error.message, { cause: error });
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
      rootsReady = false;
      await ensureRoots(limit);
      stat = await session.setData(limit, paths.clock, Buffer.alloc(0));
    }
    noteClock(stat);
    return mtimeOf(stat);
  }

  /**
   * Whether `holder`'s lease is over on ZooKeeper's clock, and how much of it is left. Far from
   * its end, the estimate from our last write's mtime decides (it can only lag ZooKeeper's
   * clock, by that write's round trip: it never calls a running lease over); near its end, or
   * without a recent sample, a write to the clock node tells the exact time. So only a lease
   * judged expired by the exact time is ever taken over.
   */
  async function leaseLeft(
    limit: Budget,
    holder: Current,
  ): Promise<{ expired: boolean; remainingMs: number }> {
    const expiresAt = holder.mtimeMs + holder.ttlMs;
    const sample = clockSample;
    if (sample) {
      const ageMs = performance.now() - sample.localMs;
      const remainingMs = expiresAt - (sample.zkMs + ageMs);
      if (ageMs < SAMPLE_MAX_AGE_MS && remainingMs > ESTIMATE_MARGIN_MS) {
        return { expired: false, remainingMs };
      }
    }
    const remainingMs = expiresAt - (await zkNow(limit));
    return { expired: remainingMs <= 0, remainingMs };
  }

  /**
   * The name node's data, version and child count. When the name's watch wants arming, this
   * read arms it (a data watch on the name node) and hands the watch what it read.
   */
  async function nameNode(limit: Budget, name: string): Promise<NameNode | undefined> {
    const watcher = options.claimWatch?.(name);
    try {
      const read = await session.getData(limit, paths.parent(name), watcher);
      if (watcher) options.claimed?.(name, watcher, read);
      const { data, stat } = read;
      return { data, version: stat.version, numChildren: stat.numChildren, mtimeMs: mtimeOf(stat) };
    } catch (error) {
      if (watcher) options.claimed?.(name, watcher, undefined);
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /** The children, and the name node's version in the same reply (one consistent snapshot). */
  async function childrenOf(limit: Budget, name: string): Promise<Children | undefined> {
    try {
      const { children, stat } = await session.getChildren(limit, paths.parent(name));
      return {
        holders: holders(children),
        waiters: waiters(children),
        all: children,
        version: stat.version,
      };
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /** Reads a holder node (leaving `watcher` on it when given); undefined once it is gone. */
  async function readHolder(
    limit: Budget,
    path: string,
    watcher?: Watcher,
  ): Promise<Current | undefined> {
    try {
      const { data, stat } = await session.getData(limit, path, watcher);
      const lease = parseData(data);
      return {
        path,
        token: zxid(stat.czxid),
        owner: lease?.owner ?? '',
        keyHash: lease?.keyHash,
        version: stat.version,
        mtimeMs: mtimeOf(stat),
        // A node without a readable lease (written by something else) never expires by TTL.
        ttlMs: lease?.ttlMs ?? Number.POSITIVE_INFINITY,
        persistent: stat.ephemeralOwner.readBigInt64BE(0) === 0n,
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

  /** The lease with `token` on `name` as this store last wrote it, if it did. */
  function ownLease(name: string, token: bigint): Current | undefined {
    const lease = ownLeases.get(name);
    return lease?.token === token ? lease : undefined;
  }

  /** The owner of the holder node at `path`, when this store granted it and it still runs. */
  function knownOwner(name: string, path: string): string | undefined {
    const lease = ownLeases.get(name);
    return lease?.path === path ? lease.owner : undefined;
  }

  /**
   * The holder node at `path` was created persistent by this store: it only goes away by an
   * end, which rewrites the name node (see the queue's take-over).
   */
  function persistentHere(path: string): boolean {
    return createdHere.has(path);
  }

  function rememberLease(name: string, lease: Current): void {
    ownLeases.delete(name);
    ownLeases.set(name, lease);
    if (ownLeases.size > OWN_LEASES_MAX) ownLeases.delete(ownLeases.keys().next().value!);
  }

  function forgetLease(name: string, token: bigint): void {
    if (ownLeases.get(name)?.token === token) ownLeases.delete(name);
  }

  /** Runs a write on `name`'s nodes, telling the watch while it is in flight. */
  async function writing<T>(name: string, write: () => Promise<T>): Promise<T> {
    options.onWrite?.(name, 1);
    try {
      return await write();
    } finally {
      options.onWrite?.(name, -1);
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
    try {
      const results = await writing(name, () =>
        session.multi(limit, (ops) =>
          ops
            .setData(paths.parent(name), endData(reason, holder.token), -1)
            .remove(holder.path, holder.version),
        ),
      );
      noteClock(results[0]?.stat);
      forgetLease(name, holder.token);
      // Before the watch looks (it waits for our writes to end): the event will say why.
      options.onEnd(holder.token, reason);
      return true;
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        // Changed elsewhere: what we remembered of it is stale.
        forgetLease(name, holder.token);
        return false;
      }
      throw error;
    }
  }

  /**
   * Creates a holder node for `owner`, in one multi-op with a rewrite of the name node at the
   * version read in `node` (so that no other grant or end happened since, and none can happen
   * concurrently: this is what keeps holders unique) and `extra` (a waiter leaving the queue).
   * Every op of a multi shares one zxid, so the name node's new mzxid is the holder's czxid, the
   * token, and its mtime ZooKeeper's time of the grant. The name node's new data records the
   * holder (owner, attempt id) and keeps the last end marker: watchers read both from it.
   */
  async function createHolder(
    limit: Budget,
    name: string,
    node: Pick<NameNode, 'data' | 'version'>,
    owner: string,
    keyHash: string | undefined,
    ttlMs: number,
    attemptId: string,
    extra: (ops: Ops) => Ops = (ops) => ops,
  ): Promise<CreateOutcome> {
    const mode = options.ephemeral
      ? CreateMode.EPHEMERAL_SEQUENTIAL
      : CreateMode.PERSISTENT_SEQUENTIAL;
    try {
      const results = await writing(name, () =>
        session.multi(limit, (ops) =>
          extra(
            ops
              .setData(
                paths.parent(name),
                grantData(node.data, owner, attemptId, options.ephemeral),
                node.version,
              )
              .create(paths.holder(name, attemptId), leaseData(owner, ttlMs, keyHash), mode),
          ),
        ),
      );
      const stat = results[0]?.stat;
      const path = results[1]?.path;
      if (!path || !stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      noteClock(stat);
      const token = zxid(stat.mzxid);
      const nowMs = mtimeOf(stat);
      rememberLease(name, { path, token, owner, keyHash, version: 0, mtimeMs: nowMs, ttlMs });
      if (!options.ephemeral) {
        createdHere.add(path);
        if (createdHere.size > OWN_LEASES_MAX)
          createdHere.delete(createdHere.values().next().value!);
      }
      return { kind: 'created', path, token, nowMs };
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
    name: string,
    holder: Current,
    ttlMs: number,
    extra: (ops: Ops) => Ops = (ops) => ops,
  ): Promise<{ expired: boolean; version: number } | undefined> {
    try {
      const results = await writing(name, () =>
        session.multi(limit, (ops) =>
          extra(
            ops.setData(
              holder.path,
              leaseData(holder.owner, ttlMs, holder.keyHash),
              holder.version,
            ),
          ),
        ),
      );
      const stat = results[0]?.stat;
      if (!stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      noteClock(stat);
      const nowMs = mtimeOf(stat);
      const expired = holder.mtimeMs + holder.ttlMs <= nowMs;
      if (expired) forgetLease(name, holder.token);
      else rememberLease(name, { ...holder, version: stat.version, mtimeMs: nowMs, ttlMs });
      return { expired, version: stat.version };
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        forgetLease(name, holder.token);
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
    leaseLeft,
    nameNode,
    childrenOf,
    readHolder,
    currentHolder,
    endLease,
    createHolder,
    refresh,
    ownLease,
    knownOwner,
    persistentHere,
    removeQuietly,
    removeLater,
    orphanCleanup,
  };
}

export type LockStore = ReturnType<typeof lockStore>;

/**
 * `holder` is the lease `owner` asked for with `keyHash` (a re-acquire): the same owner without
 * the lease's key is another requester.
 */
export function isOwnLease(holder: Current, owner: string, keyHash: string | undefined): boolean {
  return holder.owner === owner && holder.keyHash === keyHash;
}

/** `token` and `keyHash` (when presented; absent: an operator's token-only call) prove holding. */
export function proves(holder: Current, token: bigint, keyHash: string | undefined): boolean {
  return holder.token === token && (keyHash === undefined || holder.keyHash === keyHash);
}
