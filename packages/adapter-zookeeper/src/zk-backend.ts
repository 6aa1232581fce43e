import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  type BackendCapabilities,
  DlmError,
  type LockBackend,
  type LockState,
  toUnavailable,
} from '@dlm/core';
import { Exception, type Stat } from 'node-zookeeper-client';
import { contenders, lockPaths } from './zk-paths.js';
import { type Budget, budget, CreateMode, isZkCode, openSession } from './zk-session.js';
import { type Holder, parseData, watchHolders, zxid } from './zk-watch.js';

export interface ZooKeeperBackendOptions {
  /** ZooKeeper connect string: `host:port,host:port,…` */
  connect: string;
  /** The root znode every path of the adapter lives under. Default `/dlm`. */
  prefix?: string;
  /**
   * The session timeout asked for (the server clamps it to 2–20 ticks). Locks live in
   * ephemeral nodes of this session: when the dlm server is gone for this long, its locks go.
   * Default 10000.
   */
  sessionTimeoutMs?: number;
  /**
   * The longest one primitive (acquire, release, extend, inspect…) may take before it
   * rejects with UNAVAILABLE. Default 2000.
   */
  commandTimeoutMs?: number;
}

interface Current extends Holder {
  version: number;
  mtimeMs: number;
  ttlMs: number;
  ephemeralOwner: Buffer;
}

const mtimeOf = (stat: Stat) => Number(stat.mtime.readBigInt64BE(0));

/** The longest delay a timer takes; a lease without a readable TTL reports this. */
const FOREVER_MS = 2 ** 31 - 1;
const capped = (ms: number) => Math.min(ms, FOREVER_MS);

/**
 * Primitives reject only with DlmError. ZooKeeper's own answers (NO_NODE, BAD_VERSION…) are
 * handled where they can occur; anything that still escapes is reported as UNAVAILABLE.
 */
function guard<A extends unknown[], R>(what: string, fn: (...args: A) => Promise<R>) {
  return (...args: A): Promise<R> =>
    fn(...args).catch((error: unknown) => {
      throw toUnavailable(error, what);
    });
}

/**
 * A dlm backend on Apache ZooKeeper.
 *
 * Each contender creates an ephemeral sequential node under the lock's parent; the lowest
 * holds. The fencing token is the holder node's `czxid`, which Zab orders across the whole
 * ensemble. Leases are measured on ZooKeeper's clock: a holder's node carries its TTL and
 * ZooKeeper stamps its `mtime`; "now" is the `mtime` of a write to a clock node. A lease whose
 * `mtime + ttlMs` has passed is taken over by the next contender (a versioned delete), so every
 * dlm server agrees when it expired.
 *
 * @example
 * const backend = zookeeperBackend({ connect: '10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181' });
 * const service = createLockService({ backend });
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): LockBackend {
  const paths = lockPaths(options.prefix ?? '/dlm');
  const commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  const session = openSession(options.connect, {
    sessionTimeoutMs: options.sessionTimeoutMs ?? 10_000,
  });
  const watch = watchHolders(session, paths, commandTimeoutMs);
  const knownParents = new Set<string>();
  /** Leases granted on nodes this session created: lost with the session. */
  const mine = new Map<string, Holder>();
  let closed = false;
  let rootsReady = false;

  const capabilities: BackendCapabilities = {
    fencing: 'strict',
    minTtlMs: 100,
    ttlGranularityMs: 1,
    durableAcrossRestart: true,
    fairQueue: false,
    expiryEvents: false,
  };

  // ---- the session's fate is the fate of the locks in it --------------------------------

  let suspendedTimer: NodeJS.Timeout | undefined;
  /** Leases declared lost while disconnected, whose nodes may outlive that (same session). */
  const abandoned = new Map<string, Holder>();

  function declareLost(): void {
    for (const [name, holder] of mine) {
      abandoned.set(name, holder);
      watch.emit(name, { name, type: 'expired', token: holder.token, owner: holder.owner });
    }
    mine.clear();
  }

  /** Back in the same session: delete what its holders were already told they lost. */
  function dropAbandoned(): void {
    for (const [name, holder] of abandoned) {
      abandoned.delete(name);
      const limit = budget('cleanup', commandTimeoutMs);
      currentHolder(limit, name)
        .then((current) =>
          current?.token === holder.token ? endLease(limit, name, current, 'expired') : false,
        )
        .catch(() => {});
    }
  }

  session.onState((state) => {
    if (state === 'connected') {
      clearTimeout(suspendedTimer);
      suspendedTimer = undefined;
      dropAbandoned();
      watch.refreshAll();
    } else if (state === 'disconnected') {
      // Like Curator's SUSPENDED → LOST: once the session may have expired on the server, no
      // lease in it can be trusted, so tell the holders before they rely on it any longer.
      clearTimeout(suspendedTimer);
      suspendedTimer = setTimeout(declareLost, session.sessionTimeoutMs());
      suspendedTimer.unref();
    } else {
      // A new session: the old one's ephemeral nodes are gone with it.
      clearTimeout(suspendedTimer);
      declareLost();
      abandoned.clear();
      watch.refreshAll();
    }
  });

  function assertOpen(what: string): void {
    if (closed) throw new DlmError('UNAVAILABLE', `${what}: the ZooKeeper backend is closed`);
  }

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

  /** The holder (lowest contender) of `name` and its lease, or undefined when free. */
  async function currentHolder(limit: Budget, name: string): Promise<Current | undefined> {
    const parent = paths.parent(name);
    for (;;) {
      let children: string[];
      try {
        children = await session.getChildren(limit, parent);
      } catch (error) {
        if (isZkCode(error, Exception.NO_NODE)) return undefined;
        throw error;
      }
      const lowest = contenders(children)[0];
      if (!lowest) return undefined;
      const path = `${parent}/${lowest}`;
      try {
        const { data, stat } = await session.getData(limit, path);
        const lease = parseData(data);
        return {
          path,
          token: zxid(stat.czxid),
          owner: lease?.owner ?? '',
          version: stat.version,
          mtimeMs: mtimeOf(stat),
          // A node without a readable lease (written by something else) never expires by TTL.
          ttlMs: lease?.ttlMs ?? Number.POSITIVE_INFINITY,
          ephemeralOwner: stat.ephemeralOwner,
        };
      } catch (error) {
        if (!isZkCode(error, Exception.NO_NODE)) throw error;
      }
    }
  }

  /**
   * Deletes `holder` (version-checked, so an extension or a takeover in between wins) and
   * records why in the parent's end marker, in one multi-op. False when it had changed.
   */
  async function endLease(
    limit: Budget,
    name: string,
    holder: Current,
    reason: 'released' | 'revoked' | 'expired',
  ): Promise<boolean> {
    watch.noteEnd(holder.token, reason);
    try {
      await session.multi(limit, (tx) =>
        tx
          .setData(paths.parent(name), Buffer.from(`${reason}:${holder.token}`))
          .remove(holder.path, holder.version),
      );
      mine.delete(name);
      return true;
    } catch (error) {
      if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
        return false;
      }
      throw error;
    }
  }

  async function removeQuietly(limit: Budget, path: string): Promise<void> {
    try {
      await session.multi(limit, (tx) => tx.remove(path, -1));
    } catch (error) {
      if (!isZkCode(error, Exception.NO_NODE)) throw error;
    }
  }

  const leaseData = (owner: string, ttlMs: number) =>
    Buffer.from(JSON.stringify({ o: owner, t: ttlMs }));

  /**
   * Our contender node: created together with a touch of the clock node, in one multi-op, so
   * the reply carries both ZooKeeper's time and the zxid the node was created at (every op of
   * a multi shares one zxid: the clock's new mzxid is the node's czxid, the token).
   * After a lost reply the node may exist: it is found again by the attempt id in its name.
   */
  async function createContender(
    limit: Budget,
    name: string,
    owner: string,
    ttlMs: number,
  ): Promise<{ path: string; token: bigint; nowMs: number }> {
    for (let attempt = 0; ; attempt += 1) {
      const attemptId = randomBytes(8).toString('hex');
      await ensureParent(limit, name);
      try {
        const results = await session.multi(limit, (tx) =>
          tx
            .create(
              paths.contender(name, attemptId),
              leaseData(owner, ttlMs),
              CreateMode.EPHEMERAL_SEQUENTIAL,
            )
            .setData(paths.clock, Buffer.alloc(0)),
        );
        const path = results[0]?.path;
        const stat = results[1]?.stat;
        if (!path || !stat) throw new DlmError('INTERNAL', 'ZooKeeper multi-op returned no result');
        return { path, token: zxid(stat.mzxid), nowMs: mtimeOf(stat) };
      } catch (error) {
        if (isZkCode(error, Exception.NO_NODE) && attempt === 0) {
          // The name's node (or the root) was deleted by hand since we made it: make it again.
          knownParents.delete(paths.parent(name));
          rootsReady = false;
          continue;
        }
        if (error instanceof DlmError && error.details.indeterminate) {
          orphanCleanup(name, attemptId);
        }
        throw error;
      }
    }
  }

  /**
   * A contender whose create reply was lost may sit in the queue and later hold the lock for
   * nobody. Once the session answers again, delete it — unless it was adopted meanwhile
   * (a retry by the same owner found it and refreshed it, bumping its version).
   */
  function orphanCleanup(name: string, attemptId: string): void {
    const attempt = async () => {
      const limit = budget('cleanup', commandTimeoutMs);
      const parent = paths.parent(name);
      const children = await session.getChildren(limit, parent);
      const orphan = children.find((child) => child.startsWith(`${attemptId}-lock-`));
      if (!orphan) return;
      const { stat } = await session.getData(limit, `${parent}/${orphan}`);
      if (stat.version !== 0) return;
      await session.multi(limit, (tx) => tx.remove(`${parent}/${orphan}`, 0));
    };
    const retry = (tries: number) => {
      if (closed || tries === 0) return;
      attempt().catch((error: unknown) => {
        if (error instanceof DlmError) setTimeout(() => retry(tries - 1), commandTimeoutMs).unref();
      });
    };
    retry(10);
  }

  return {
    kind: 'zookeeper',
    capabilities,

    tryAcquire: guard(
      'acquire',
      async ({ name, owner, ttlMs }: AcquireRequest): Promise<AcquireResult> => {
        assertOpen('acquire');
        const limit = budget('acquire', commandTimeoutMs);
        ttlMs = Math.max(ttlMs, capabilities.minTtlMs);
        const ours = await createContender(limit, name, owner, ttlMs);
        let done = false;
        try {
          for (;;) {
            const holder = await currentHolder(limit, name);
            if (!holder || holder.path === ours.path) {
              done = true;
              const grant = { name, owner, token: ours.token, ttlMs };
              mine.set(name, { path: ours.path, token: ours.token, owner });
              watch.noteGrant(name, ours.token);
              return { granted: true, grant };
            }
            const expiresAt = holder.mtimeMs + holder.ttlMs;
            if (expiresAt <= ours.nowMs) {
              // Expired on ZooKeeper's clock: take it over, then look again (our node may now
              // be the lowest, or another contender's is).
              await endLease(limit, name, holder, 'expired');
              continue;
            }
            if (holder.owner === owner) {
              // The same owner again: refresh its lease (version-checked) and drop our node, in
              // one multi-op. The token stays the holder node's czxid.
              try {
                await session.multi(limit, (tx) =>
                  tx
                    .setData(holder.path, leaseData(owner, ttlMs), holder.version)
                    .remove(ours.path, -1),
                );
              } catch (error) {
                if (isZkCode(error, Exception.BAD_VERSION) || isZkCode(error, Exception.NO_NODE)) {
                  continue;
                }
                throw error;
              }
              done = true;
              watch.noteGrant(name, holder.token);
              return { granted: true, grant: { name, owner, token: holder.token, ttlMs } };
            }
            await removeQuietly(limit, ours.path);
            done = true;
            watch.noteHeld(name);
            return { granted: false, ttlRemainingMs: capped(Math.max(1, expiresAt - ours.nowMs)) };
          }
        } finally {
          // Whatever went wrong, our contender must not linger and later hold the lock for
          // nobody: remove it in the background (it is ephemeral, so at worst it goes with the
          // session).
          if (!done) {
            const path = ours.path;
            removeQuietly(budget('cleanup', commandTimeoutMs), path).catch(() => {});
          }
        }
      },
    ),

    release: guard('release', async ({ name, token }: { name: string; token: bigint }) => {
      assertOpen('release');
      const limit = budget('release', commandTimeoutMs);
      for (;;) {
        const holder = await currentHolder(limit, name);
        if (!holder || holder.token !== token) return false;
        if (await endLease(limit, name, holder, 'released')) return true;
      }
    }),

    extend: guard(
      'extend',
      async ({ name, token, ttlMs }: { name: string; token: bigint; ttlMs: number }) => {
        assertOpen('extend');
        const limit = budget('extend', commandTimeoutMs);
        ttlMs = Math.max(ttlMs, capabilities.minTtlMs);
        for (;;) {
          const holder = await currentHolder(limit, name);
          if (!holder || holder.token !== token) return null;
          let stat: Stat;
          try {
            stat = await session.setData(
              limit,
              holder.path,
              leaseData(holder.owner, ttlMs),
              holder.version,
            );
          } catch (error) {
            if (isZkCode(error, Exception.BAD_VERSION)) continue;
            if (isZkCode(error, Exception.NO_NODE)) return null;
            throw error;
          }
          // The write's own mtime is ZooKeeper's time of the extension: if the old lease had
          // already run out by then, it was not ours to extend — end it instead.
          if (holder.mtimeMs + holder.ttlMs <= mtimeOf(stat)) {
            await endLease(limit, name, { ...holder, version: stat.version }, 'expired');
            return null;
          }
          return { name, owner: holder.owner, token, ttlMs };
        }
      },
    ),

    inspect: guard('inspect', async (name: string): Promise<LockState | null> => {
      assertOpen('inspect');
      const limit = budget('inspect', commandTimeoutMs);
      const holder = await currentHolder(limit, name);
      if (!holder) return null;
      const remaining = holder.mtimeMs + holder.ttlMs - (await zkNow(limit));
      if (remaining <= 0) return null;
      return {
        name,
        owner: holder.owner,
        token: holder.token,
        ttlRemainingMs: capped(remaining),
      };
    }),

    watch(name, listener) {
      return watch.subscribe(name, listener);
    },

    revoke: guard('revoke', async (name: string) => {
      assertOpen('revoke');
      const limit = budget('revoke', commandTimeoutMs);
      for (;;) {
        const holder = await currentHolder(limit, name);
        if (!holder) return false;
        if (await endLease(limit, name, holder, 'revoked')) return true;
      }
    }),

    list: guard('list', async (namePrefix: string): Promise<LockState[]> => {
      assertOpen('list');
      const limit = budget('list', commandTimeoutMs);
      let parents: string[];
      try {
        parents = await session.getChildren(limit, paths.locks);
      } catch (error) {
        if (isZkCode(error, Exception.NO_NODE)) return [];
        throw error;
      }
      const names = parents.map(paths.nameOf).filter((name) => name.startsWith(namePrefix));
      const nowMs = await zkNow(limit);
      const states = await Promise.all(
        names.map(async (name) => {
          const holder = await currentHolder(limit, name);
          if (!holder) return null;
          const remaining = holder.mtimeMs + holder.ttlMs - nowMs;
          if (remaining <= 0) return null;
          return {
            name,
            owner: holder.owner,
            token: holder.token,
            ttlRemainingMs: capped(remaining),
          };
        }),
      );
      return states.filter((state) => state !== null);
    }),

    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(suspendedTimer);
      watch.close();
      await session.close();
    },
  };
}
