import type { LockEvent, Unsubscribe } from '@dlm/core';
import { Exception } from 'node-zookeeper-client';
import { holders, type LockPaths } from './zk-paths.js';
import { budget, isZkCode, type ZkSession } from './zk-session.js';

type Listener = (event: LockEvent) => void;
type EndReason = 'released' | 'revoked' | 'expired';

export interface Holder {
  path: string;
  token: bigint;
  owner: string;
}

/**
 * Per-name watches on the lock holder. ZooKeeper watches fire once, so each firing re-reads
 * and re-arms. While a lock is held only the holder's node is watched (a data watch fires on
 * its extension and on its deletion), so contenders coming and going wake nobody; while it is
 * free the parent's children are watched, to see the next holder.
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
  /** Re-reads every watched name (after a reconnect or a new session). */
  refreshAll(): void;
  close(): void;
}

interface NameWatch {
  name: string;
  listeners: Set<Listener>;
  holder: Holder | undefined;
  initialized: boolean;
  /** A caller was told "held" before the first read of the holder completed. */
  heldBeforeFirstRead: boolean;
  /** The children watch fired since the last read: a contender came or went. */
  childrenChanged: boolean;
  running: boolean;
  again: boolean;
}

const MARKER = /^(released|revoked|expired):(\d+)$/;

/** A holder node's data: its owner and lease length (ZooKeeper's mtime says from when). */
export function parseData(data: Buffer): { owner: string; ttlMs: number } | undefined {
  try {
    const parsed = JSON.parse(data.toString('utf8')) as { o?: unknown; t?: unknown };
    if (typeof parsed.o === 'string' && typeof parsed.t === 'number') {
      return { owner: parsed.o, ttlMs: parsed.t };
    }
  } catch {}
  return undefined;
}

export function leaseData(owner: string, ttlMs: number): Buffer {
  return Buffer.from(JSON.stringify({ o: owner, t: ttlMs }));
}

export function zxid(value: Buffer): bigint {
  return value.readBigInt64BE(0);
}

export function watchHolders(
  session: ZkSession,
  paths: LockPaths,
  commandTimeoutMs: number,
): HolderWatch {
  const names = new Map<string, NameWatch>();
  const ends = new Map<bigint, EndReason>();
  const granted = new Map<string, bigint>();
  let closed = false;

  function emit(watch: NameWatch, event: LockEvent): void {
    for (const listener of [...watch.listeners]) {
      try {
        listener(event);
      } catch {}
    }
  }

  /** Why `holder` went away: this adapter knows, or the end marker on the parent says. */
  async function reasonFor(name: string, holder: Holder): Promise<EndReason> {
    const known = ends.get(holder.token);
    if (known) {
      ends.delete(holder.token);
      return known;
    }
    try {
      const { data } = await session.getData(budget('watch', commandTimeoutMs), paths.parent(name));
      const marker = MARKER.exec(data.toString('utf8'));
      if (marker && BigInt(marker[2]!) === holder.token) return marker[1] as EndReason;
    } catch {}
    // Nothing says it was released: its session ended (dlm server gone) or it was taken over
    // after expiring. Either way the lease ended without its holder releasing it.
    return 'expired';
  }

  async function observe(
    watch: NameWatch,
    current: Holder | undefined,
    childrenChanged: boolean,
  ): Promise<void> {
    const previous = watch.holder;
    const first = !watch.initialized;
    watch.holder = current;
    watch.initialized = true;
    if (previous && previous.token !== current?.token) {
      const type = await reasonFor(watch.name, previous);
      emit(watch, { name: watch.name, type, token: previous.token, owner: previous.owner });
    }
    if (!current && !previous && (first ? watch.heldBeforeFirstRead : childrenChanged)) {
      // A holder came and went between two reads (or before the first one), unseen by this
      // watch but maybe seen by a caller now waiting: wake it, to look again.
      emit(watch, { name: watch.name, type: 'released' });
    }
    const newest = granted.get(watch.name) ?? 0n;
    if (!first && current && current.token !== previous?.token && current.token >= newest) {
      granted.set(watch.name, current.token);
      emit(watch, {
        name: watch.name,
        type: 'acquired',
        token: current.token,
        owner: current.owner,
      });
    }
  }

  /** Reads the holder and leaves exactly the watch that will tell of its next change. */
  async function evaluate(watch: NameWatch): Promise<void> {
    const limit = budget('watch', commandTimeoutMs);
    const parent = paths.parent(watch.name);
    const fire = () => schedule(watch);
    // Only a children watch armed while the lock looked free means "a holder may have come
    // and gone unseen"; one left over from a read that then found a holder means nothing.
    let armedWhileFree = false;
    const fireChildren = () => {
      if (armedWhileFree) watch.childrenChanged = true;
      schedule(watch);
    };
    const childrenChanged = watch.childrenChanged;
    watch.childrenChanged = false;
    for (;;) {
      let children: string[];
      try {
        ({ children } = await session.getChildren(limit, parent));
      } catch (error) {
        if (!isZkCode(error, Exception.NO_NODE)) throw error;
        if (await session.exists(limit, parent, fire)) continue;
        return observe(watch, undefined, childrenChanged);
      }
      let lowest = holders(children)[0];
      if (!lowest) {
        ({ children } = await session.getChildren(limit, parent, fireChildren));
        lowest = holders(children)[0];
        if (!lowest) {
          armedWhileFree = true;
          return observe(watch, undefined, childrenChanged);
        }
      }
      const path = `${parent}/${lowest}`;
      try {
        const { data, stat } = await session.getData(limit, path, fire);
        return observe(
          watch,
          { path, token: zxid(stat.czxid), owner: parseData(data)?.owner ?? '' },
          childrenChanged,
        );
      } catch (error) {
        if (!isZkCode(error, Exception.NO_NODE)) throw error;
      }
    }
  }

  function schedule(watch: NameWatch): void {
    if (closed || names.get(watch.name) !== watch) return;
    if (watch.running) {
      watch.again = true;
      return;
    }
    watch.running = true;
    void (async () => {
      do {
        watch.again = false;
        try {
          await evaluate(watch);
        } catch {
          // Unreachable right now: refreshAll() runs again once the session is back.
        }
      } while (watch.again && !closed && names.get(watch.name) === watch);
      watch.running = false;
    })();
  }

  return {
    subscribe(name, listener) {
      let watch = names.get(name);
      if (!watch) {
        watch = {
          name,
          listeners: new Set(),
          holder: undefined,
          initialized: false,
          heldBeforeFirstRead: false,
          childrenChanged: false,
          running: false,
          again: false,
        };
        names.set(name, watch);
        schedule(watch);
      }
      watch.listeners.add(listener);
      const subscribed = watch;
      return () => {
        subscribed.listeners.delete(listener);
        // Watches already armed in ZooKeeper fire once more and are then ignored.
        if (subscribed.listeners.size === 0 && names.get(name) === subscribed) names.delete(name);
      };
    },
    emit(name, event) {
      const watch = names.get(name);
      if (watch) emit(watch, event);
    },
    noteEnd(token, reason) {
      ends.set(token, reason);
      // Forget what no watch came to collect (nobody watched that name).
      if (ends.size > 10_000) ends.delete(ends.keys().next().value!);
    },
    noteHeld(name) {
      const watch = names.get(name);
      if (watch && !watch.initialized) watch.heldBeforeFirstRead = true;
    },
    noteGrant(name, token) {
      if ((granted.get(name) ?? 0n) < token) granted.set(name, token);
      if (granted.size > 10_000) granted.delete(granted.keys().next().value!);
    },
    refreshAll() {
      for (const watch of names.values()) schedule(watch);
    },
    close() {
      closed = true;
      names.clear();
    },
  };
}
