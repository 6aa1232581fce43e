import { type Clock, DlmError, systemClock } from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import {
  delayEndOf,
  type EndReason,
  endData,
  grantData,
  leaseData,
  mtimeOf,
  parseData,
  zxid,
} from './zk-data.js';
import { type EntrySpec, EXCLUSIVE, holders, type LockPaths, specOf, waiters } from './zk-paths.js';
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
export interface Current extends Holder, EntrySpec {
  version: number;
  /** The lease key's hash as of `version` (never reported beyond this adapter). */
  keyHash: string | undefined;
  mtimeMs: number;
  /** The lease from `mtimeMs`: its data's TTL, but never past `capAtMs`. */
  ttlMs: number;
  /** Exclusive only, above 0: the lease's lock-delay, fixed at its grant (extends keep it). */
  lockDelayMs?: number | undefined;
  /** With a cap on holding (`maxHoldMs`): the node's ctime plus it, on ZooKeeper's clock. */
  capAtMs?: number | undefined;
  /**
   * The node is persistent: it only goes away by an end, which rewrites the name node (an
   * ephemeral one also goes with its session, without that write). Undefined: not read.
   */
  persistent?: boolean;
  /**
   * The name node's data version right after this store granted the lease (undefined: not
   * granted here). While the lease holds, only its end can write the name node.
   */
  nameVersion?: number;
}

/** Who a release hands its lock to: a waiter of this backend at the head of the queue. */
export interface HandOverTo {
  owner: string;
  spec: EntrySpec;
  keyHash: string | undefined;
  ttlMs: number;
  /** Its lock-delay (0: none). */
  lockDelayMs: number;
  /** Its waiter node, deleted in the same multi-op. */
  waiterPath: string;
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
  /** Times the clock samples and the background clean-up retries. Default `systemClock`. */
  clock?: Clock;
}

/**
 * The operations on one name's nodes that tryAcquire, the queue and the sweeper share. Each is
 * one ZooKeeper request or one multi-op; versions make every write conditional on what was read.
 */
export class LockStore {
  private readonly knownParents = new Set<string>();
  private rootsReady = false;
  /**
   * Leases this store granted or refreshed, by name and token, as they were after that write: a
   * release or an extend by their token is then one multi-op on the known path and version (any
   * change made elsewhere fails it, and the caller looks again).
   */
  private readonly ownLeases = new Map<string, Current>();
  /** The owner of each lease in `ownLeases`, by its holder node's path. */
  private readonly ownPaths = new Map<string, string>();
  /** Persistent holder nodes this store created lately (whether or not they still exist). */
  private readonly createdHere = new Set<string>();
  /** ZooKeeper's time of our last write, and our monotonic time when its reply came. */
  private clockSample: { zkMs: number; localMs: number } | undefined;
  private readonly clock: Clock;

  constructor(
    private readonly session: ZkSession,
    private readonly paths: LockPaths,
    private readonly options: LockStoreOptions,
  ) {
    this.clock = options.clock ?? systemClock;
  }

  async ensureRoots(limit: Budget): Promise<void> {
    if (this.rootsReady) return;
    await this.session.mkdirp(limit, this.paths.clock);
    await this.session.mkdirp(limit, this.paths.locks);
    this.rootsReady = true;
  }

  async ensureParent(limit: Budget, name: string): Promise<void> {
    const parent = this.paths.parent(name);
    if (this.knownParents.has(parent)) return;
    await this.ensureRoots(limit);
    await this.session.mkdirp(limit, parent);
    this.knownParents.add(parent);
  }

  /** A node we made is gone (swept, or deleted by hand): make it again next time. */
  forgetParent(name: string): void {
    this.knownParents.delete(this.paths.parent(name));
    this.rootsReady = false;
  }

  private noteClock(stat: Stat | undefined): void {
    if (stat) this.clockSample = { zkMs: mtimeOf(stat), localMs: this.clock.now() };
  }

  /** ZooKeeper's time now: the mtime of a write to the clock node. */
  async zkNow(limit: Budget): Promise<number> {
    let stat: Stat;
    try {
      stat = await this.session.setData(limit, this.paths.clock, Buffer.alloc(0));
    } catch (error) {
      // Touching the clock changes nothing anyone reads: a lost reply is no ambiguity.
      if (error instanceof DlmError)
        throw new DlmError('UNAVAILABLE', error.message, { cause: error });
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
      this.rootsReady = false;
      await this.ensureRoots(limit);
      stat = await this.session.setData(limit, this.paths.clock, Buffer.alloc(0));
    }
    this.noteClock(stat);
    return mtimeOf(stat);
  }

  /**
   * Whether `holder`'s lease is over on ZooKeeper's clock, and how much of it is left. Far from
   * its end, the estimate from our last write's mtime decides (it can only lag ZooKeeper's
   * clock, by that write's round trip: it never calls a running lease over); near its end, or
   * without a recent sample, a write to the clock node tells the exact time. So only a lease
   * judged expired by the exact time is ever taken over.
   */
  leaseLeft(limit: Budget, holder: Current): Promise<{ expired: boolean; remainingMs: number }> {
    return this.timeLeft(limit, holder.mtimeMs + holder.ttlMs);
  }

  /**
   * How long `name`'s lock-delay has left on ZooKeeper's clock, from its name node as read
   * (`delayEndOf`); 0 when it has none or it is over. Judged as `leaseLeft` judges a lease: a
   * delay is only ever called over by ZooKeeper's exact time, so a grant at the version of `node`
   * read is never inside it (the grant's own write comes later still).
   */
  async delayLeft(limit: Budget, node: Pick<NameNode, 'data' | 'mtimeMs'>): Promise<number> {
    const endsAt = delayEndOf(node);
    if (endsAt === undefined) return 0;
    const { expired, remainingMs } = await this.timeLeft(limit, endsAt);
    return expired ? 0 : Math.max(1, Math.ceil(remainingMs));
  }

  /** Whether ZooKeeper's clock has passed `expiresAt`, and how long it has left (see `leaseLeft`). */
  private async timeLeft(
    limit: Budget,
    expiresAt: number,
  ): Promise<{ expired: boolean; remainingMs: number }> {
    const sample = this.clockSample;
    if (sample) {
      const ageMs = this.clock.now() - sample.localMs;
      const remainingMs = expiresAt - (sample.zkMs + ageMs);
      if (ageMs < SAMPLE_MAX_AGE_MS && remainingMs > ESTIMATE_MARGIN_MS) {
        return { expired: false, remainingMs };
      }
    }
    const remainingMs = expiresAt - (await this.zkNow(limit));
    return { expired: remainingMs <= 0, remainingMs };
  }

  /**
   * The name node's data, version and child count. When the name's watch wants arming, this
   * read arms it (a data watch on the name node) and hands the watch what it read.
   */
  async nameNode(limit: Budget, name: string): Promise<NameNode | undefined> {
    const watcher = this.options.claimWatch?.(name);
    try {
      const read = await this.session.getData(limit, this.paths.parent(name), watcher);
      if (watcher) this.options.claimed?.(name, watcher, read);
      const { data, stat } = read;
      return { data, version: stat.version, numChildren: stat.numChildren, mtimeMs: mtimeOf(stat) };
    } catch (error) {
      if (watcher) this.options.claimed?.(name, watcher, undefined);
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /** The children, and the name node's version in the same reply (one consistent snapshot). */
  async childrenOf(limit: Budget, name: string): Promise<Children | undefined> {
    try {
      const { children, stat } = await this.session.getChildren(limit, this.paths.parent(name));
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
  async readHolder(limit: Budget, path: string, watcher?: Watcher): Promise<Current | undefined> {
    try {
      const { data, stat } = await this.session.getData(limit, path, watcher);
      const lease = parseData(data);
      const named = specOf(path);
      const mtimeMs = mtimeOf(stat);
      const cap = capOf(lease?.maxHoldMs, Number(stat.ctime.readBigInt64BE(0)));
      return Object.assign({}, cap, {
        path,
        mode: lease?.mode ?? named.mode,
        limit: lease?.mode === 'shared' ? lease.limit : named.limit,
        token: zxid(stat.czxid),
        owner: lease?.owner ?? '',
        keyHash: lease?.keyHash,
        version: stat.version,
        mtimeMs,
        // A node without a readable lease (written by something else) never expires by TTL.
        ttlMs: capped(lease?.ttlMs ?? Number.POSITIVE_INFINITY, cap.capAtMs, mtimeMs),
        lockDelayMs: lease?.lockDelayMs,
        persistent: stat.ephemeralOwner.readBigInt64BE(0) === 0n,
        ...(lease?.maxHoldMs === undefined ? {} : { maxHoldMs: lease.maxHoldMs }),
      });
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  /**
   * Reads the holder nodes `children` lists (in parallel: one round trip, however many), each
   * with `watcher` left on it when given; those gone meanwhile are left out. Token order.
   */
  async readHolders(
    limit: Budget,
    name: string,
    children: Pick<Children, 'holders'>,
    watcher?: Watcher,
  ): Promise<Current[]> {
    const parent = this.paths.parent(name);
    const read = await Promise.all(
      children.holders.map((child) => this.readHolder(limit, `${parent}/${child}`, watcher)),
    );
    return read
      .filter((holder) => holder !== undefined)
      .sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
  }

  /** Every holder of `name` (token order) and the children they were listed in. */
  async allHolders(
    limit: Budget,
    name: string,
  ): Promise<{ children: Children | undefined; holders: Current[] }> {
    const children = await this.childrenOf(limit, name);
    if (!children?.holders.length) return { children, holders: [] };
    return { children, holders: await this.readHolders(limit, name, children) };
  }

  /** The holder of `name` with `token`, if it still holds (its lease may be over). */
  async holderByToken(limit: Budget, name: string, token: bigint): Promise<Current | undefined> {
    const { holders: all } = await this.allHolders(limit, name);
    return all.find((holder) => holder.token === token);
  }

  /**
   * `leaseLeft` for several holders, asking ZooKeeper's exact time at most once (when one of
   * them is near its end).
   */
  async leasesLeft(
    limit: Budget,
    all: Current[],
  ): Promise<Array<{ holder: Current; expired: boolean; remainingMs: number }>> {
    if (all.length === 1) return [{ holder: all[0]!, ...(await this.leaseLeft(limit, all[0]!)) }];
    const sample = this.clockSample;
    const ageMs = sample ? this.clock.now() - sample.localMs : Number.POSITIVE_INFINITY;
    const estimate = sample && ageMs < SAMPLE_MAX_AGE_MS ? sample.zkMs + ageMs : undefined;
    const near =
      estimate === undefined ||
      all.some((holder) => holder.mtimeMs + holder.ttlMs - estimate <= ESTIMATE_MARGIN_MS);
    const nowMs = near ? await this.zkNow(limit) : estimate;
    return all.map((holder) => {
      const remainingMs = holder.mtimeMs + holder.ttlMs - nowMs;
      return { holder, expired: near && remainingMs <= 0, remainingMs };
    });
  }

  /** The lease with `token` on `name` as this store last wrote it, if it did. */
  ownLease(name: string, token: bigint): Current | undefined {
    return this.ownLeases.get(leaseKey(name, token));
  }

  /** The owner of the holder node at `path`, when this store granted it and it still runs. */
  knownOwner(_name: string, path: string): string | undefined {
    return this.ownPaths.get(path);
  }

  /**
   * The holder node at `path` was created persistent by this store: it only goes away by an
   * end, which rewrites the name node (see the queue's take-over).
   */
  persistentHere(path: string): boolean {
    return this.createdHere.has(path);
  }

  private rememberLease(name: string, lease: Current): void {
    const key = leaseKey(name, lease.token);
    this.ownLeases.delete(key);
    this.ownLeases.set(key, lease);
    this.ownPaths.set(lease.path, lease.owner);
    if (this.ownLeases.size > OWN_LEASES_MAX) {
      const oldest = this.ownLeases.keys().next().value!;
      this.ownPaths.delete(this.ownLeases.get(oldest)!.path);
      this.ownLeases.delete(oldest);
    }
  }

  private forgetLease(name: string, token: bigint): void {
    const key = leaseKey(name, token);
    const lease = this.ownLeases.get(key);
    if (!lease) return;
    this.ownLeases.delete(key);
    this.ownPaths.delete(lease.path);
  }

  /** Runs a write on `name`'s nodes, telling the watch while it is in flight. */
  private async writing<T>(name: string, write: () => Promise<T>): Promise<T> {
    this.options.onWrite?.(name, 1);
    try {
      return await write();
    } finally {
      this.options.onWrite?.(name, -1);
    }
  }

  /**
   * Deletes `holder` (version-checked, so an extension or a takeover in between wins) and
   * records why in the name node's end marker, in one multi-op. False when it had changed.
   */
  async endLease(
    limit: Budget,
    name: string,
    holder: Current,
    reason: EndReason,
  ): Promise<boolean> {
    try {
      const results = await this.writing(name, () =>
        this.session.multi(limit, (ops) =>
          ops
            .setData(
              this.paths.parent(name),
              endData(reason, holder.token, holder.mode === 'shared', endDelay(holder)),
              -1,
            )
            .remove(holder.path, holder.version),
        ),
      );
      this.noteClock(results[0]?.stat);
      this.forgetLease(name, holder.token);
      // Before the watch looks (it waits for our writes to end): the event will say why.
      this.options.onEnd(holder.token, reason);
      return true;
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        // Changed elsewhere: what we remembered of it is stale.
        this.forgetLease(name, holder.token);
        return false;
      }
      throw error;
    }
  }

  /**
   * Ends every holder in `all` (each at its version) in one multi-op, recording `reason` for
   * the newest in the name node. False when one of them had changed (nothing was applied).
   */
  async endAll(limit: Budget, name: string, all: Current[], reason: EndReason): Promise<boolean> {
    if (all.length === 1) return this.endLease(limit, name, all[0]!, reason);
    const newest = all[all.length - 1]!;
    const shared = all.some((holder) => holder.mode === 'shared');
    try {
      await this.writing(name, () =>
        this.session.multi(limit, (ops) => {
          let next = ops.setData(
            this.paths.parent(name),
            endData(reason, newest.token, shared),
            -1,
          );
          for (const holder of all) next = next.remove(holder.path, holder.version);
          return next;
        }),
      );
      for (const holder of all) {
        this.forgetLease(name, holder.token);
        this.options.onEnd(holder.token, reason);
      }
      return true;
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        for (const holder of all) this.forgetLease(name, holder.token);
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
  async createHolder(
    limit: Budget,
    name: string,
    node: Pick<NameNode, 'data' | 'version'>,
    owner: string,
    keyHash: string | undefined,
    ttlMs: number,
    attemptId: string,
    extra: (ops: Ops) => Ops = (ops) => ops,
    spec: EntrySpec = EXCLUSIVE,
    lockDelayMs = 0,
  ): Promise<CreateOutcome> {
    const shared = spec.mode === 'shared';
    const mode = this.options.ephemeral
      ? CreateMode.EPHEMERAL_SEQUENTIAL
      : CreateMode.PERSISTENT_SEQUENTIAL;
    try {
      const results = await this.writing(name, () =>
        this.session.multi(limit, (ops) =>
          extra(
            ops
              .setData(
                this.paths.parent(name),
                grantData(node.data, owner, attemptId, this.options.ephemeral, shared),
                node.version,
              )
              .create(
                this.paths.holder(name, attemptId, spec),
                leaseData(owner, ttlMs, keyHash, spec, lockDelayMs),
                mode,
              ),
          ),
        ),
      );
      const lease = { owner, keyHash, ttlMs, lockDelayMs, ...spec };
      return {
        kind: 'created',
        ...this.noteCreated(name, results[0]?.stat, results[1]?.path, lease),
      };
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION)) return { kind: 'conflict' };
      if (isZkCode(error, Exception.NO_NODE)) {
        this.forgetParent(name);
        return { kind: 'missing' };
      }
      if (error instanceof DlmError && error.details.indeterminate)
        this.orphanCleanup(name, attemptId);
      throw error;
    }
  }

  /**
   * What a grant's multi-op answered (the name node's new stat, the holder node's path): the
   * lease is remembered for a release or extend in one step. Every op of a multi-op shares
   * one zxid, so the name node's mzxid is the holder's czxid, the token.
   */
  private noteCreated(
    name: string,
    stat: Stat | undefined,
    path: string | undefined,
    lease: Pick<
      Current,
      'owner' | 'keyHash' | 'ttlMs' | 'mode' | 'limit' | 'lockDelayMs' | 'maxHoldMs'
    >,
  ): { path: string; token: bigint; nowMs: number } {
    if (!path || !stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
    this.noteClock(stat);
    const token = zxid(stat.mzxid);
    const nowMs = mtimeOf(stat);
    this.rememberLease(
      name,
      Object.assign({}, lease, capOf(lease.maxHoldMs, nowMs), {
        path,
        token,
        version: 0,
        mtimeMs: nowMs,
        nameVersion: stat.version,
      }),
    );
    // A holder with a lock-delay is never taken over at the name node's next version unread:
    // its end may start the delay (see `persistentHere`).
    if (!this.options.ephemeral && !lease.lockDelayMs) {
      this.createdHere.add(path);
      if (this.createdHere.size > OWN_LEASES_MAX)
        this.createdHere.delete(this.createdHere.values().next().value!);
    }
    return { path, token, nowMs };
  }

  /**
   * Releases `from` (a lease granted here, at its known versions) and grants the lock to `to`,
   * a waiter at the head of the queue, in one multi-op: one write per handoff instead of the
   * release's and the waiter's own. The name node is written twice (the end marker, then the
   * grant): a waiter elsewhere that slept on `from` takes the lock at the version after its
   * end (see the queue's take-over) and must not find that version holding a new holder.
   * Undefined when anything changed meanwhile (nothing was applied).
   *
   * A shared `from` hands its room to a shared waiter with the same limit: one holder out and
   * one in, so the count stays within the limit whatever else was granted or ended since, and
   * the name node is written at any version (twice, still: a take-over at the version after
   * the end fails).
   */
  async handOver(
    limit: Budget,
    name: string,
    from: Current,
    to: HandOverTo,
    attemptId: string,
  ): Promise<{ path: string; token: bigint } | undefined> {
    const parent = this.paths.parent(name);
    const shared = from.mode === 'shared';
    if (!shared && from.nameVersion === undefined) return undefined;
    // A release after its lease's deadline starts its lock-delay (`delayEndOf`): the name goes
    // the usual way, through its end marker.
    if (from.lockDelayMs) return undefined;
    if (shared && (to.spec.mode !== 'shared' || to.spec.limit !== from.limit)) return undefined;
    const ended = endData('released', from.token, shared);
    const [endAt, grantAt] = shared ? [-1, -1] : [from.nameVersion!, from.nameVersion! + 1];
    const { ephemeral } = this.options;
    const mode = ephemeral ? CreateMode.EPHEMERAL_SEQUENTIAL : CreateMode.PERSISTENT_SEQUENTIAL;
    try {
      const results = await this.writing(name, () =>
        this.session.multi(limit, (ops) =>
          ops
            .remove(from.path, from.version)
            .setData(parent, ended, endAt)
            .setData(
              parent,
              grantData(ended, to.owner, attemptId, ephemeral, to.spec.mode === 'shared'),
              grantAt,
            )
            .create(
              this.paths.holder(name, attemptId, to.spec),
              leaseData(to.owner, to.ttlMs, to.keyHash, to.spec, to.lockDelayMs),
              mode,
            )
            .remove(to.waiterPath, -1),
        ),
      );
      this.forgetLease(name, from.token);
      this.options.onEnd(from.token, 'released');
      return this.noteCreated(name, results[2]?.stat, results[3]?.path, {
        owner: to.owner,
        keyHash: to.keyHash,
        ttlMs: to.ttlMs,
        lockDelayMs: to.lockDelayMs,
        ...to.spec,
      });
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        return undefined;
      }
      if (error instanceof DlmError && error.details.indeterminate)
        this.orphanCleanup(name, attemptId);
      throw error;
    }
  }

  /**
   * Rewrites a holder's lease (version-checked), with `extra` ops in the same multi-op. The
   * write's own mtime is ZooKeeper's time of it: when the old lease had already run out by
   * then, it was no longer there to refresh, and the caller must end it instead. Undefined when
   * the holder changed meanwhile.
   */
  async refresh(
    limit: Budget,
    name: string,
    holder: Current,
    ttlMs: number,
    extra: (ops: Ops) => Ops = (ops) => ops,
  ): Promise<
    { expired: boolean; version: number; ttlMs: number; holdRemainingMs?: number } | undefined
  > {
    try {
      const results = await this.writing(name, () =>
        this.session.multi(limit, (ops) =>
          extra(
            ops.setData(
              holder.path,
              leaseData(holder.owner, ttlMs, holder.keyHash, holder, holder.lockDelayMs),
              holder.version,
            ),
          ),
        ),
      );
      const stat = results[0]?.stat;
      if (!stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
      this.noteClock(stat);
      const nowMs = mtimeOf(stat);
      // Up to the cap on holding only; at it, the lease is over (every reader says so).
      const granted = capped(ttlMs, holder.capAtMs, nowMs);
      const expired = holder.mtimeMs + holder.ttlMs <= nowMs || granted <= 0;
      if (expired) this.forgetLease(name, holder.token);
      else {
        this.rememberLease(
          name,
          Object.assign({}, holder, {
            version: stat.version,
            mtimeMs: nowMs,
            ttlMs: granted,
          }),
        );
      }
      const { capAtMs } = holder;
      const hold = capAtMs === undefined ? {} : { holdRemainingMs: capAtMs - nowMs };
      return { expired, version: stat.version, ttlMs: granted, ...hold };
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        this.forgetLease(name, holder.token);
        return undefined;
      }
      throw error;
    }
  }

  async removeQuietly(limit: Budget, path: string): Promise<void> {
    try {
      await this.session.multi(limit, (ops) => ops.remove(path, -1));
    } catch (error) {
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
    }
  }

  /** Removes a node in the background until it is gone (or the backend closes). */
  removeLater(path: string): void {
    let delayMs = 250;
    const attempt = () => {
      if (this.options.isClosed()) return;
      this.removeQuietly(budget('cleanup', this.options.commandTimeoutMs), path).catch(() => {
        delayMs = Math.min(delayMs * 2, 5_000);
        this.clock.setTimer(attempt, delayMs);
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
  orphanCleanup(name: string, attemptId: string): void {
    const attempt = async () => {
      const limit = budget('cleanup', this.options.commandTimeoutMs);
      const children = await this.childrenOf(limit, name);
      for (const child of children?.all ?? []) {
        if (!child.startsWith(`${attemptId}-`)) continue;
        const path = `${this.paths.parent(name)}/${child}`;
        if (waiters([child]).length) {
          await this.removeQuietly(limit, path);
          continue;
        }
        const holder = await this.readHolder(limit, path);
        if (holder?.version === 0) await this.endLease(limit, name, holder, 'expired');
      }
    };
    const retry = (tries: number) => {
      if (this.options.isClosed() || tries === 0) return;
      attempt().catch((error: unknown) => {
        if (error instanceof DlmError) {
          this.clock.setTimer(() => retry(tries - 1), this.options.commandTimeoutMs);
        }
      });
    };
    retry(10);
  }
}

export function lockStore(
  session: ZkSession,
  paths: LockPaths,
  options: LockStoreOptions,
): LockStore {
  return new LockStore(session, paths, options);
}

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

const leaseKey = (name: string, token: bigint) => `${token}:${name}`;

/** What an end of `holder` records of its lock-delay (exclusive, with one): see `delayEndOf`. */
function endDelay(holder: Current): { deadlineMs: number; delayMs: number } | undefined {
  if (holder.mode !== 'exclusive' || !holder.lockDelayMs) return undefined;
  return { deadlineMs: holder.mtimeMs + holder.ttlMs, delayMs: holder.lockDelayMs };
}

/** A lease's cap on holding, on ZooKeeper's clock: `maxHoldMs` after `fromMs` (its ctime). */
function capOf(maxHoldMs: number | undefined, fromMs: number): { capAtMs?: number } {
  return maxHoldMs === undefined ? {} : { capAtMs: fromMs + maxHoldMs };
}

/** `ttlMs` from `fromMs`, but no further than `capAtMs` (0 or less: at or past it). */
export function capped(ttlMs: number, capAtMs: number | undefined, fromMs: number): number {
  return capAtMs === undefined ? ttlMs : Math.min(ttlMs, capAtMs - fromMs);
}
