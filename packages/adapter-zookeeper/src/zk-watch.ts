import type { LockEvent, Unsubscribe } from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import {
  type EndMarker,
  type EndReason,
  type NameRecord,
  parseData,
  parseNameNode,
  type RecordedHolder,
  zxid,
} from './zk-data.js';
import { type EntrySpec, holders, type LockPaths, specOf } from './zk-paths.js';
import { type Budget, budget, isZkCode, type ZkSession } from './zk-session.js';

type Listener = (event: LockEvent) => void;

export interface Holder {
  path: string;
  token: bigint;
  owner: string;
}

/**
 * Per-name watches on the lock's name node. Every grant and every end rewrites the name node in
 * the same multi-op as the holder change (a grant records the holder's owner, its token being the
 * node's mzxid; an end writes its marker), so one data watch on it, and one read per firing, tells
 * every change of holder; extensions and waiters coming and going do not touch it and wake nobody.
 * Only an ephemeral holder can vanish without such a write (its session ended): while one holds,
 * its node is watched too.
 *
 * ZooKeeper watches fire once, so each firing re-reads and re-arms, unless nobody subscribes any
 * more. A read the adapter makes of the name node anyway (the first step of an acquire) arms the
 * watch when it wants arming, and a firing caused by a write of this adapter is looked at once
 * that write has answered: a release's firing finds its subscriber gone, and costs nothing.
 */
export interface HolderWatch {
  subscribe(name: string, listener: Listener): Unsubscribe;
  /** Tells listeners of `name` about an event the adapter learned of itself. */
  emit(name: string, event: LockEvent): void;
  /** Remembers why this adapter ended a lease, for the event its deletion will cause. */
  noteEnd(token: bigint, reason: EndReason): void;
  /** tryAcquire found `name` held: its caller may now wait for this watch to wake it. */
  noteHeld(name: string): void;
  /** A token this adapter granted: later events about older holders are stale. */
  noteGrant(name: string, token: bigint): void;
  /** The watcher for a read of `name`'s name node about to be made, if the watch wants arming. */
  claim(name: string): (() => void) | undefined;
  /** What the read made with `watcher` found (undefined: it failed, or there was no node). */
  claimed(name: string, watcher: () => void, read: { data: Buffer; stat: Stat } | undefined): void;
  /** A write on `name`'s nodes starts (+1) or ends (-1). */
  writing(name: string, delta: 1 | -1): void;
  /** Re-reads every watched name (after a reconnect or a new session). */
  refreshAll(): void;
  close(): void;
}

/** A holder as a watch knows it. */
interface Known {
  token: bigint;
  owner: string;
  mode: EntrySpec['mode'];
  ephemeral: boolean;
}

interface NameWatch {
  name: string;
  listeners: Set<Listener>;
  /** The holders at the last read, by token. */
  holders: Map<bigint, Known>;
  /** The holder nodes read so far while the name has shared holders, by path. */
  cache: Map<string, Known>;
  /** The name node's data version at the last read (undefined: no node). */
  version: number | undefined;
  initialized: boolean;
  /** A caller was told "held" before the first read of the holder completed. */
  heldBeforeFirstRead: boolean;
  /** A watch this NameWatch set is pending in ZooKeeper. */
  armed: boolean;
  /** A read of the adapter's own is arming it. */
  claimed: boolean;
  /** A look is due once this adapter's writes on the name have answered. */
  deferred: boolean;
  /** A look is scheduled (setImmediate). */
  queued: boolean;
  running: boolean;
  again: boolean;
  /** The one function every watch of this NameWatch is set with (the client dedupes by it). */
  fire: () => void;
}

/** The per-name watches of one backend (see `HolderWatch`). */
class HolderWatchers implements HolderWatch {
  private readonly names = new Map<string, NameWatch>();
  private readonly ends = new Map<bigint, EndReason>();
  private readonly granted = new Map<string, bigint>();
  /** Writes of this adapter in flight, per name. */
  private readonly writes = new Map<string, number>();
  private closed = false;

  constructor(
    private readonly session: ZkSession,
    private readonly paths: LockPaths,
    private readonly commandTimeoutMs: number,
  ) {}

  private isCurrent(watch: NameWatch): boolean {
    return !this.closed && this.names.get(watch.name) === watch;
  }

  private deliver(watch: NameWatch, event: LockEvent): void {
    for (const listener of [...watch.listeners]) {
      try {
        listener(event);
      } catch {}
    }
  }

  /** Why `holder` went away: this adapter knows, or the end marker read with the change says. */
  private reasonFor(holder: { token: bigint }, end: EndMarker | undefined): EndReason {
    const known = this.ends.get(holder.token);
    if (known) {
      this.ends.delete(holder.token);
      return known;
    }
    if (end?.token === holder.token) return end.reason;
    // A revoke ends every holder in one write, whose marker names the newest of them.
    if (end?.reason === 'revoked' && holder.token < end.token) return 'revoked';
    // Nothing says it was released: its session ended (dlm server gone) or it was taken over
    // after expiring. Either way the lease ended without its holder releasing it.
    return 'expired';
  }

  /**
   * What changed between the holders at the last read and `now`: one end event per holder
   * gone, one `acquired` (with its mode) per holder new. `complete`: `now` was listed from the
   * children (shared holders), not inferred from the name node's last write; then the count of
   * holders is known too.
   */
  private observe(
    watch: NameWatch,
    now: Map<bigint, Known>,
    end: EndMarker | undefined,
    version: number | undefined,
    complete: boolean,
  ): void {
    const previous = watch.holders;
    const first = !watch.initialized;
    // Created (version 0) is no change; a rewrite since the last read is.
    const versionChanged = version !== undefined && version > (watch.version ?? 0);
    watch.holders = now;
    watch.version = version;
    watch.initialized = true;
    const count = complete ? { holders: now.size } : {};
    for (const [token, gone] of [...previous].sort(byToken)) {
      if (now.has(token)) continue;
      const type = this.reasonFor(gone, end);
      this.deliver(watch, { name: watch.name, type, token, owner: gone.owner, ...count });
    }
    if (!now.size && !previous.size && (first ? watch.heldBeforeFirstRead : versionChanged)) {
      // A holder came and went between two reads (or before the first one), unseen by this
      // watch but maybe seen by a caller now waiting: wake it, to look again.
      this.deliver(watch, { name: watch.name, type: 'released' });
    }
    if (first) return;
    for (const [token, added] of [...now].sort(byToken)) {
      if (previous.has(token)) continue;
      const newest = this.granted.get(watch.name) ?? 0n;
      // From the name node alone, a holder older than one granted here is stale news.
      if (!complete && token < newest) continue;
      if (token > newest) this.granted.set(watch.name, token);
      this.deliver(watch, {
        name: watch.name,
        type: 'acquired',
        token,
        owner: added.owner,
        mode: added.mode,
        ...count,
      });
    }
  }

  /**
   * The holders as the children list them (shared holders: the name node's last write tells
   * only the newest). Nodes read before are not read again; ephemeral ones are watched, since
   * they may vanish with their session without a name-node write.
   */
  private async listHolders(watch: NameWatch): Promise<Map<bigint, Known>> {
    const limit = budget('watch', this.commandTimeoutMs);
    const parent = this.paths.parent(watch.name);
    const children = (await this.holderNodes(limit, parent)) ?? [];
    const cache = new Map<string, Known>();
    await Promise.all(
      children.map(async (child) => {
        const path = `${parent}/${child}`;
        let known = watch.cache.get(path);
        try {
          if (!known) {
            const { data, stat } = await this.session.getData(limit, path);
            known = {
              token: zxid(stat.czxid),
              owner: parseData(data)?.owner ?? '',
              mode: specOf(child).mode,
              ephemeral: stat.ephemeralOwner.readBigInt64BE(0) !== 0n,
            };
          }
          if (known.ephemeral && !(await this.session.exists(limit, path, watch.fire))) return;
        } catch (error) {
          if (isZkCode(error, Exception.NO_NODE)) return;
          throw error;
        }
        cache.set(path, known);
      }),
    );
    watch.cache = cache;
    return new Map([...cache.values()].map((known) => [known.token, known]));
  }

  /** An ephemeral holder's node may be gone without a name-node write: watch it as well. */
  private async ephemeralAlive(watch: NameWatch, holder: RecordedHolder): Promise<boolean> {
    const limit = budget('watch', this.commandTimeoutMs);
    const parent = this.paths.parent(watch.name);
    const children = await this.holderNodes(limit, parent);
    const node = children?.find((child) => child.startsWith(`${holder.attemptId}-`));
    return (
      node !== undefined &&
      (await this.session.exists(limit, `${parent}/${node}`, watch.fire)) !== null
    );
  }

  /** The holder nodes under the name node `parent`; undefined when it is gone. */
  private async holderNodes(limit: Budget, parent: string): Promise<string[] | undefined> {
    try {
      return holders((await this.session.getChildren(limit, parent)).children);
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return undefined;
      throw error;
    }
  }

  private async seen(watch: NameWatch, data: Buffer, stat: Stat): Promise<void> {
    const record: NameRecord = parseNameNode(data, stat);
    const hadShared = [...watch.holders.values()].some((known) => known.mode === 'shared');
    if (record.shared || hadShared) {
      const now = await this.listHolders(watch);
      if (this.isCurrent(watch)) this.observe(watch, now, record.end, stat.version, true);
      return;
    }
    watch.cache.clear();
    let holder = record.holder;
    if (holder?.ephemeral && !(await this.ephemeralAlive(watch, holder))) holder = undefined;
    if (!this.isCurrent(watch)) return;
    const now = new Map<bigint, Known>();
    if (holder) now.set(holder.token, Object.assign({}, holder, { mode: 'exclusive' }));
    this.observe(watch, now, record.end, stat.version, false);
  }

  /** Reads the name node, leaving the watch that will tell of its next change. */
  private async evaluate(watch: NameWatch): Promise<void> {
    if (watch.armed || watch.claimed) return;
    const limit = budget('watch', this.commandTimeoutMs);
    const parent = this.paths.parent(watch.name);
    for (;;) {
      let read: { data: Buffer; stat: Stat };
      try {
        read = await this.session.getData(limit, parent, watch.fire);
      } catch (error) {
        if (!isZkCode(error, Exception.NO_NODE)) throw error;
        // No name node (never used, or swept): nobody held it at this read, and a holder the
        // next read finds came after it. Then watch for its creation.
        this.freeAtFirstRead(watch);
        if (await this.session.exists(limit, parent, watch.fire)) continue;
        watch.armed = true;
        watch.cache.clear();
        return this.observe(watch, new Map(), undefined, undefined, false);
      }
      watch.armed = true;
      return this.seen(watch, read.data, read.stat);
    }
  }

  /**
   * A read found no name node before the watch's first look: the name was free then, after the
   * watch began. That is the watch's starting point, so a holder a later read finds (granted in
   * between) is reported as acquired, not taken for one that held before the watch began.
   */
  private freeAtFirstRead(watch: NameWatch): void {
    if (!watch.initialized && this.isCurrent(watch)) {
      this.observe(watch, new Map(), undefined, undefined, false);
    }
  }

  private schedule(watch: NameWatch): void {
    if (!this.isCurrent(watch)) return;
    if (watch.running) {
      watch.again = true;
      return;
    }
    watch.running = true;
    void (async () => {
      do {
        watch.again = false;
        try {
          await this.evaluate(watch);
        } catch {
          // Unreachable right now: refreshAll() runs again once the session is back.
          watch.armed = false;
        }
      } while (watch.again && this.isCurrent(watch));
      watch.running = false;
    })();
  }

  /**
   * Looks at `name` soon: after this adapter's writes on it have answered (the change was ours,
   * and whoever asked for it may unsubscribe first), and after this turn of the event loop.
   */
  private lookSoon(watch: NameWatch): void {
    if (!this.isCurrent(watch)) return;
    if ((this.writes.get(watch.name) ?? 0) > 0) {
      watch.deferred = true;
      return;
    }
    if (watch.queued) return;
    watch.queued = true;
    setImmediate(() => {
      watch.queued = false;
      this.schedule(watch);
    });
  }

  subscribe(name: string, listener: Listener): Unsubscribe {
    let watch = this.names.get(name);
    if (!watch) {
      const created: NameWatch = {
        name,
        listeners: new Set(),
        holders: new Map(),
        cache: new Map(),
        version: undefined,
        initialized: false,
        heldBeforeFirstRead: false,
        armed: false,
        claimed: false,
        deferred: false,
        queued: false,
        running: false,
        again: false,
        fire: () => {
          created.armed = false;
          this.lookSoon(created);
        },
      };
      watch = created;
      this.names.set(name, created);
      this.lookSoon(created);
    }
    watch.listeners.add(listener);
    const subscribed = watch;
    return () => {
      subscribed.listeners.delete(listener);
      // Watches already armed in ZooKeeper fire once more and are then ignored.
      if (subscribed.listeners.size === 0 && this.names.get(name) === subscribed)
        this.names.delete(name);
    };
  }

  emit(name: string, event: LockEvent): void {
    const watch = this.names.get(name);
    if (watch) this.deliver(watch, event);
  }

  noteEnd(token: bigint, reason: EndReason): void {
    this.ends.set(token, reason);
    // Forget what no watch came to collect (nobody watched that name).
    if (this.ends.size > 10_000) this.ends.delete(this.ends.keys().next().value!);
  }

  noteHeld(name: string): void {
    const watch = this.names.get(name);
    if (watch && !watch.initialized) watch.heldBeforeFirstRead = true;
  }

  noteGrant(name: string, token: bigint): void {
    if ((this.granted.get(name) ?? 0n) < token) this.granted.set(name, token);
    if (this.granted.size > 10_000) this.granted.delete(this.granted.keys().next().value!);
  }

  claim(name: string): (() => void) | undefined {
    const watch = this.names.get(name);
    if (!watch || this.closed || watch.armed || watch.claimed || watch.running) return undefined;
    watch.claimed = true;
    return watch.fire;
  }

  claimed(name: string, watcher: () => void, read: { data: Buffer; stat: Stat } | undefined): void {
    const watch = this.names.get(name);
    // Only the NameWatch that claimed: another one subscribed since has a watcher of its own.
    if (!watch?.claimed || watch.fire !== watcher) return;
    watch.claimed = false;
    if (!read) {
      this.freeAtFirstRead(watch);
      this.lookSoon(watch);
      return;
    }
    watch.armed = true;
    this.seen(watch, read.data, read.stat).catch(() => {
      watch.armed = false;
      this.lookSoon(watch);
    });
  }

  writing(name: string, delta: 1 | -1): void {
    const count = (this.writes.get(name) ?? 0) + delta;
    if (count > 0) {
      this.writes.set(name, count);
      return;
    }
    this.writes.delete(name);
    const watch = this.names.get(name);
    if (watch?.deferred) {
      watch.deferred = false;
      this.lookSoon(watch);
    }
  }

  refreshAll(): void {
    for (const watch of this.names.values()) {
      watch.armed = false;
      this.schedule(watch);
    }
  }

  close(): void {
    this.closed = true;
    this.names.clear();
  }
}

export function watchHolders(
  session: ZkSession,
  paths: LockPaths,
  commandTimeoutMs: number,
): HolderWatch {
  return new HolderWatchers(session, paths, commandTimeoutMs);
}

const byToken = ([a]: [bigint, unknown], [b]: [bigint, unknown]) => (a < b ? -1 : a > b ? 1 : 0);
