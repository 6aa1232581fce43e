import {
  type AcquireRequest,
  type AcquireResult,
  type BackendCapabilities,
  DlmError,
  type HolderProof,
  type LockBackend,
  type LockState,
  toUnavailable,
} from '@dlm/core';
import { Exception } from 'node-zookeeper-client';
import { contender } from './zk-contend.js';
import { type Current, lockStore, proves } from './zk-locks.js';
import { lockPaths } from './zk-paths.js';
import { fairQueue } from './zk-queue.js';
import { budget, isZkCode, openSession } from './zk-session.js';
import { sweeper } from './zk-sweep.js';
import { type Holder, watchHolders } from './zk-watch.js';

export interface ZooKeeperBackendOptions {
  /** ZooKeeper connect string: `host:port,host:port,…` */
  connect: string;
  /** The root znode every path of the adapter lives under. Default `/dlm`. */
  prefix?: string;
  /**
   * The session timeout asked for (the server clamps it to 2–20 ticks). Waiters' queue nodes
   * live in this session: when the dlm server is gone for this long, its waiters leave every
   * queue (and, with `ephemeral`, its locks are freed). Default 10000.
   */
  sessionTimeoutMs?: number;
  /**
   * The longest one primitive (acquire, release, extend, inspect…) may take before it
   * rejects with UNAVAILABLE. Default 2000.
   */
  commandTimeoutMs?: number;
  /**
   * Tie every lock to the ZooKeeper session of the dlm server that granted it (ephemeral
   * holder nodes, as Curator's lock recipe does): a lock ends when that server's session ends,
   * even before its TTL, and a client whose server died cannot extend or release it through
   * another server. Default false: locks are persistent nodes that end by release, revocation
   * or their TTL on ZooKeeper's clock, whichever dlm server is alive.
   */
  ephemeral?: boolean;
  /**
   * How often (± half, at random) each backend sweeps away expired holders of names nobody
   * contends for any more, and name nodes unused for this long. 0 turns sweeping off.
   * Default 600000 (10 min).
   */
  sweepIntervalMs?: number;
}

/** A ZooKeeper backend; `sweep()` runs one garbage sweep now (see `sweepIntervalMs`). */
export interface ZooKeeperBackend extends LockBackend {
  /** Resolves with the number of nodes deleted. */
  sweep(): Promise<number>;
}

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
 * A lock is a persistent sequential holder node under the lock's name node; at most one exists,
 * because every grant rewrites the name node at the version it read. The fencing token is the
 * holder node's `czxid`, which Zab orders across the whole ensemble. Leases are measured on
 * ZooKeeper's clock: a holder's node carries its TTL and ZooKeeper stamps its `mtime`; "now" is
 * the `mtime` of a write to a clock node. A lease whose `mtime + ttlMs` has passed is ended by
 * the next contender (a versioned delete), so every dlm server agrees when it expired — and a
 * lock outlives the dlm server that granted it. Waiters queue in ephemeral sequential nodes,
 * each watching its predecessor.
 *
 * @example
 * const backend = zookeeperBackend({ connect: '10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181' });
 * const service = createLockService({ backend });
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): ZooKeeperBackend {
  const paths = lockPaths(options.prefix ?? '/dlm');
  const commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  const ephemeral = options.ephemeral ?? false;
  const session = openSession(options.connect, {
    sessionTimeoutMs: options.sessionTimeoutMs ?? 10_000,
  });
  const watch = watchHolders(session, paths, commandTimeoutMs);
  /** With `ephemeral`: leases granted on nodes this session created, lost with the session. */
  const mine = new Map<string, Holder>();
  let closed = false;

  const capabilities: BackendCapabilities = {
    fencing: 'strict',
    minTtlMs: 100,
    ttlGranularityMs: 1,
    durableAcrossRestart: true,
    fairQueue: true,
    expiryEvents: false,
  };

  const store = lockStore(session, paths, {
    commandTimeoutMs,
    ephemeral,
    isClosed: () => closed,
    onEnd(token, reason) {
      watch.noteEnd(token, reason);
      for (const [name, holder] of mine) if (holder.token === token) mine.delete(name);
    },
    claimWatch: (name) => watch.claim(name),
    claimed: (name, watcher, read) => watch.claimed(name, watcher, read),
    onWrite: (name, delta) => watch.writing(name, delta),
  });
  const contend = contender(store, paths);

  function noteGrant(name: string, owner: string, path: string, token: bigint): void {
    if (ephemeral) mine.set(name, { path, token, owner });
    watch.noteGrant(name, token);
  }

  const queue = fairQueue({
    session,
    paths,
    store,
    commandTimeoutMs,
    minTtlMs: capabilities.minTtlMs,
    isClosed: () => closed,
    onGrant: noteGrant,
  });
  const sweep = sweeper(session, paths, store, {
    intervalMs: options.sweepIntervalMs ?? 600_000,
    commandTimeoutMs,
    isClosed: () => closed,
  });

  // ---- with `ephemeral`, the session's fate is the fate of the locks in it ----------------

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
      store
        .currentHolder(limit, name)
        .then((current) =>
          current?.token === holder.token ? store.endLease(limit, name, current, 'expired') : false,
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
      // (Persistent locks do not depend on the session: `mine` stays empty.)
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

  /** What inspect and list report: nothing for a lease already over on ZooKeeper's clock. */
  function stateOf(name: string, holder: Current | undefined, nowMs: number): LockState | null {
    if (!holder) return null;
    const remaining = holder.mtimeMs + holder.ttlMs - nowMs;
    if (remaining <= 0) return null;
    return { name, owner: holder.owner, token: holder.token, ttlRemainingMs: capped(remaining) };
  }

  return {
    kind: 'zookeeper',
    capabilities,

    tryAcquire: guard(
      'acquire',
      async ({ name, owner, ttlMs, keyHash }: AcquireRequest): Promise<AcquireResult> => {
        assertOpen('acquire');
        const limit = budget('acquire', commandTimeoutMs);
        ttlMs = Math.max(ttlMs, capabilities.minTtlMs);
        const outcome = await contend(limit, { name, owner, ttlMs, keyHash });
        if (outcome.kind === 'granted') {
          noteGrant(name, owner, outcome.path, outcome.token);
          return { granted: true, grant: { name, owner, token: outcome.token, ttlMs } };
        }
        watch.noteHeld(name);
        return outcome.kind === 'held'
          ? { granted: false, ttlRemainingMs: outcome.ttlRemainingMs }
          : { granted: false };
      },
    ),

    acquireQueued: guard('acquire', queue.acquireQueued),

    release: guard('release', async ({ name, token, keyHash }: HolderProof) => {
      assertOpen('release');
      const limit = budget('release', commandTimeoutMs);
      // A lease granted here: one multi-op on its known path and version (fails if it changed
      // elsewhere), so the key hash compared is the one at that version.
      const own = store.ownLease(name, token);
      if (own && !proves(own, token, keyHash)) return false;
      if (own && (await store.endLease(limit, name, own, 'released'))) return true;
      for (;;) {
        const holder = await store.currentHolder(limit, name);
        if (!holder || !proves(holder, token, keyHash)) return false;
        if (await store.endLease(limit, name, holder, 'released')) return true;
      }
    }),

    extend: guard(
      'extend',
      async ({ name, token, ttlMs, keyHash }: HolderProof & { ttlMs: number }) => {
        assertOpen('extend');
        const limit = budget('extend', commandTimeoutMs);
        ttlMs = Math.max(ttlMs, capabilities.minTtlMs);
        // A lease granted or extended here is tried at its known path and version first.
        let known = store.ownLease(name, token);
        for (;;) {
          const holder = known ?? (await store.currentHolder(limit, name));
          known = undefined;
          if (!holder || !proves(holder, token, keyHash)) return null;
          const refreshed = await store.refresh(limit, name, holder, ttlMs);
          if (!refreshed) continue;
          if (refreshed.expired) {
            // The old lease had already run out by the time of the write: not ours to extend.
            await store.endLease(limit, name, { ...holder, version: refreshed.version }, 'expired');
            return null;
          }
          return { name, owner: holder.owner, token, ttlMs };
        }
      },
    ),

    inspect: guard('inspect', async (name: string): Promise<LockState | null> => {
      assertOpen('inspect');
      const limit = budget('inspect', commandTimeoutMs);
      const holder = await store.currentHolder(limit, name);
      if (!holder) return null;
      return stateOf(name, holder, await store.zkNow(limit));
    }),

    watch(name, listener) {
      return watch.subscribe(name, listener);
    },

    revoke: guard('revoke', async (name: string) => {
      assertOpen('revoke');
      const limit = budget('revoke', commandTimeoutMs);
      for (;;) {
        const holder = await store.currentHolder(limit, name);
        if (!holder) return false;
        if (await store.endLease(limit, name, holder, 'revoked')) return true;
      }
    }),

    list: guard('list', async (namePrefix: string): Promise<LockState[]> => {
      assertOpen('list');
      const limit = budget('list', commandTimeoutMs);
      let parents: string[];
      try {
        ({ children: parents } = await session.getChildren(limit, paths.locks));
      } catch (error) {
        if (isZkCode(error, Exception.NO_NODE)) return [];
        throw error;
      }
      const names = parents.map(paths.nameOf).filter((name) => name.startsWith(namePrefix));
      const nowMs = await store.zkNow(limit);
      const states = await Promise.all(
        names.map(async (name) => stateOf(name, await store.currentHolder(limit, name), nowMs)),
      );
      return states.filter((state) => state !== null);
    }),

    sweep: guard('sweep', () => {
      assertOpen('sweep');
      return sweep.sweepNow();
    }),

    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(suspendedTimer);
      sweep.stop();
      queue.wakeAll();
      watch.close();
      await session.close();
    },
  };
}
