import type { LockEvent, Unsubscribe } from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import type { LockPaths } from './zk-paths.js';
import { budget, isZkCode, type ZkSession } from './zk-session.js';

type Listener = (event: LockEvent) => void;

/**
 * Release requests over ZooKeeper: one persistent node per asked name (`LockPaths.ask`), whose
 * data a request rewrites (`{ r?: reason }`). Each server watching the name keeps a one-shot data
 * watch on that node (re-armed at each firing), and a firing whose read finds a newer data
 * version is a request its watchers hear. Two requests between a firing and the re-arming read
 * are heard as one (the later); a request is not a change of holder and needs no more.
 */
export interface AskWatch {
  subscribe(name: string, listener: Listener): Unsubscribe;
  /** Writes a request for `name` (creating its node the first time). */
  ask(name: string, reason: string | undefined): Promise<void>;
  /** After a reconnect: every watched name's node is read (and its watch set) again. */
  refreshAll(): void;
  close(): void;
}

interface Asked {
  listeners: Set<Listener>;
  /** The data version last seen (-1: no node yet; undefined: not read yet). */
  version: number | undefined;
}

export function watchAsks(session: ZkSession, paths: LockPaths, timeoutMs: number): AskWatch {
  const byName = new Map<string, Asked>();
  let closed = false;

  function heard(name: string, asked: Asked, data: Buffer | undefined, stat: Stat | null) {
    const version = stat ? stat.version : -1;
    const known = asked.version;
    asked.version = version;
    // The first read only learns where the node stands; later, a newer version is a request.
    if (known === undefined || version <= known || !data) return;
    let reason: unknown;
    try {
      ({ r: reason } = JSON.parse(data.toString()) as { r?: unknown });
    } catch {
      return;
    }
    const event: LockEvent = { name, type: 'releaseRequested' };
    if (typeof reason === 'string') event.reason = reason;
    for (const listener of [...asked.listeners]) {
      try {
        listener(event);
      } catch {}
    }
  }

  /** Reads the node with a watch that reads it again when it fires. */
  function arm(name: string, asked: Asked): void {
    if (closed || byName.get(name) !== asked) return;
    const path = paths.ask(name);
    const watcher = () => arm(name, asked);
    const limit = budget('watch release requests', timeoutMs);
    session.getData(limit, path, watcher).then(
      ({ data, stat }) => heard(name, asked, data, stat),
      (error: unknown) => {
        if (!isZkCode(error, Exception.NO_NODE)) return;
        // No node yet: watch for its creation instead.
        session.exists(limit, path, watcher).then(
          (stat) => {
            if (!stat) heard(name, asked, undefined, null);
          },
          () => {},
        );
      },
    );
  }

  return {
    subscribe(name, listener) {
      let asked = byName.get(name);
      if (!asked) {
        asked = { listeners: new Set(), version: undefined };
        byName.set(name, asked);
        arm(name, asked);
      }
      const mine = asked;
      mine.listeners.add(listener);
      return () => {
        mine.listeners.delete(listener);
        if (mine.listeners.size === 0 && byName.get(name) === mine) byName.delete(name);
      };
    },
    async ask(name, reason) {
      const path = paths.ask(name);
      const data = Buffer.from(JSON.stringify(reason === undefined ? {} : { r: reason }));
      const limit = budget('requestRelease', timeoutMs);
      try {
        await session.setData(limit, path, data, -1);
      } catch (error) {
        if (!isZkCode(error, Exception.NO_NODE)) throw error;
        await session.mkdirp(limit, path);
        await session.setData(limit, path, data, -1);
      }
    },
    refreshAll() {
      for (const [name, asked] of byName) arm(name, asked);
    },
    close() {
      closed = true;
      byName.clear();
    },
  };
}
