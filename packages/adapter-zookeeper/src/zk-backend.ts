import type * as core from '@dlm/core';
import { DlmError, MAX_TIMER_MS, systemClock, toUnavailable } from '@dlm/core';
import { Exception } from 'node-zookeeper-client';
import { watchAsks } from './zk-asks.js';
import { type Contend, contender } from './zk-contend.js';
import { delayEndOf } from './zk-data.js';
import { type Current, type LockStore, lockStore, proves } from './zk-locks.js';
import { type LockPaths, lockPaths } from './zk-paths.js';
import { zkQueue } from './zk-queue.js';
import {
  type Budget,
  budget,
  isZkCode,
  openSession,
  type SessionState,
  type ZkSession,
} from './zk-session.js';
import { sweeper } from './zk-sweep.js';
import { type Holder, type HolderWatch, watchHolders } from './zk-watch.js';

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
  /** Times the wait before a disconnected session's leases are declared lost. Default `systemClock`. */
  clock?: core.Clock;
}

/** A ZooKeeper backend; `sweep()` runs one garbage sweep now (see `sweepIntervalMs`). */
export interface ZooKeeperBackend extends core.LockBackend {
  /** Resolves with the number of nodes deleted. */
  sweep(): Promise<number>;
}

/** A lease without a readable TTL reports the longest delay a timer takes. */
const capped = (ms: number) => Math.min(ms, MAX_TIMER_MS);

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
 * A lease is a persistent sequential holder node under the lock's name node: one exclusive
 * holder, or up to `limit` shared ones (the mode and limit in the node's name and data), never
 * more, because every grant rewrites the name node at the version it read. The fencing token is the
 * holder node's `czxid`, which Zab orders across the whole ensemble. Leases are measured on
 * ZooKeeper's clock: a holder's node carries its TTL and ZooKeeper stamps its `mtime`; "now" is
 * the `mtime` of a write to a clock node. A lease whose `mtime + ttlMs` has passed is ended by
 * the next contender (a versioned delete), so every dlm server agrees when it expired — and a
 * lock outlives the dlm server that granted it. Waiters of both modes queue in one line of
 * ephemeral sequential nodes, each watching the nearest thing that blocks it.
 *
 * @example
 * const backend = zookeeperBackend({ connect: '10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181' });
 * const service = createLockService({ backend });
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): ZooKeeperBackend {
  const paths = lockPaths(options.prefix ?? '/dlm');
  const commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  const ephemeral = options.ephemeral ?? false;
  const clock = options.clock ?? systemClock;
  const session = openSession(options.connect, {
    sessionTimeoutMs: options.sessionTimeoutMs ?? 10_000,
  });
  const watch = watchHolders(session, paths, commandTimeoutMs);
  const asks = watchAsks(session, paths, commandTimeoutMs);
  // Its callbacks run only once the backend is in use, after `zk` below is assigned.
  const store = lockStore(session, paths, {
    commandTimeoutMs,
    ephemeral,
    clock,
    isClosed: () => zk.closed,
    onEnd(token, reason) {
      watch.noteEnd(token, reason);
      for (const [key, holder] of zk.mine) if (holder.token === token) zk.mine.delete(key);
    },
    claimWatch: (name) => watch.claim(name),
    claimed: (name, watcher, read) => watch.claimed(name, watcher, read),
    onWrite: (name, delta) => watch.writing(name, delta),
  });
  // Its callbacks too run only once `zk` below is assigned.
  const queue = zkQueue({
    session,
    paths,
    store,
    commandTimeoutMs,
    minTtlMs: capabilities.minTtlMs,
    isClosed: () => zk.closed,
    clock,
    onGrant: (name, owner, path, token) => noteGranted(zk, name, owner, path, token),
  });
  const zk: Zk = {
    session,
    paths,
    watch,
    commandTimeoutMs,
    ephemeral,
    clock,
    mine: new Map(),
    abandoned: new Map(),
    suspendedTimer: undefined,
    closed: false,
    store,
    handOver: queue.handOver,
  };
  const contend = contender(store);
  const sweep = sweeper(session, paths, store, {
    intervalMs: options.sweepIntervalMs ?? 600_000,
    commandTimeoutMs,
    isClosed: () => zk.closed,
  });
  session.onState((state) => onSessionState(zk, state));
  session.onState((state) => {
    if (state !== 'disconnected') asks.refreshAll();
  });

  return {
    kind: 'zookeeper',
    // An ephemeral holder can vanish with its session, an end nobody records: no lock-delay then.
    capabilities: Object.assign({}, capabilities, { lockDelay: !ephemeral }),
    tryAcquire: guard('acquire', (request: core.AcquireRequest) =>
      tryAcquire(zk, contend, request),
    ),
    queue: queue.queue,
    release: guard('release', (proof: core.HolderProof) => release(zk, proof)),
    extend: guard('extend', (request: core.HolderProof & { ttlMs: number }) => extend(zk, request)),
    inspect: guard('inspect', (name: string) => inspect(zk, name)),
    watch(name, listener) {
      const holders = watch.subscribe(name, listener);
      const requests = asks.subscribe(name, listener);
      return () => {
        holders();
        requests();
      };
    },
    requestRelease: guard('requestRelease', (name: string, reason: string | undefined) => {
      assertOpen(zk, 'requestRelease');
      return asks.ask(name, reason);
    }),
    revoke: guard('revoke', (name: string) => revoke(zk, name)),
    lockDelayOf: guard('inspect', (name: string) => lockDelayOf(zk, name)),
    list: guard('list', (namePrefix: string) => list(zk, namePrefix)),
    sweep: guard('sweep', () => {
      assertOpen(zk, 'sweep');
      return sweep.sweepNow();
    }),
    async close() {
      if (zk.closed) return;
      zk.closed = true;
      zk.suspendedTimer?.cancel();
      sweep.stop();
      await queue.close();
      watch.close();
      asks.close();
      await session.close();
    },
  };
}

const capabilities: core.BackendCapabilities = {
  fencing: 'strict',
  minTtlMs: 100,
  ttlGranularityMs: 1,
  durableAcrossRestart: true,
  fairQueue: true,
  expiryEvents: false,
  sharedModes: true,
  // A cap in the holder node's data, counted from its ctime on ZooKeeper's clock (zk-data.ts).
  maxHold: true,
};

/** What the primitives of one ZooKeeper backend share. */
interface Zk {
  readonly session: ZkSession;
  readonly paths: LockPaths;
  readonly watch: HolderWatch;
  readonly store: LockStore;
  /** Releases a lease granted here by handing it to this backend's head waiter, if it can. */
  readonly handOver: (limit: Budget, name: string, lease: Current) => Promise<boolean>;
  readonly commandTimeoutMs: number;
  readonly ephemeral: boolean;
  readonly clock: core.Clock;
  /** With `ephemeral`: leases granted on nodes this session created, lost with the session. */
  /** By name and token (a name may have several shared holders granted here). */
  readonly mine: Map<string, Holder & { name: string }>;
  /** Leases declared lost while disconnected, whose nodes may outlive that (same session). */
  readonly abandoned: Map<string, Holder & { name: string }>;
  suspendedTimer: core.Timer | undefined;
  closed: boolean;
}

function noteGranted(zk: Zk, name: string, owner: string, path: string, token: bigint): void {
  if (zk.ephemeral) zk.mine.set(`${token}:${name}`, { name, path, token, owner });
  zk.watch.noteGrant(name, token);
}

function assertOpen(zk: Zk, what: string): void {
  if (zk.closed) throw new DlmError('UNAVAILABLE', `${what}: the ZooKeeper backend is closed`);
}

// ---- with `ephemeral`, the session's fate is the fate of the locks in it ------------------

function declareLost(zk: Zk): void {
  for (const [key, holder] of zk.mine) {
    const { name } = holder;
    zk.abandoned.set(key, holder);
    zk.watch.emit(name, { name, type: 'expired', token: holder.token, owner: holder.owner });
  }
  zk.mine.clear();
}

/** Back in the same session: delete what its holders were already told they lost. */
function dropAbandoned(zk: Zk): void {
  for (const [key, holder] of zk.abandoned) {
    const { name } = holder;
    zk.abandoned.delete(key);
    const limit = budget('cleanup', zk.commandTimeoutMs);
    zk.store
      .holderByToken(limit, name, holder.token)
      .then((current) => (current ? zk.store.endLease(limit, name, current, 'expired') : false))
      .catch(() => {});
  }
}

function onSessionState(zk: Zk, state: SessionState): void {
  zk.suspendedTimer?.cancel();
  zk.suspendedTimer = undefined;
  if (state === 'connected') {
    dropAbandoned(zk);
    zk.watch.refreshAll();
  } else if (state === 'disconnected') {
    // Like Curator's SUSPENDED → LOST: once the session may have expired on the server, no
    // lease in it can be trusted, so tell the holders before they rely on it any longer.
    // (Persistent locks do not depend on the session: `mine` stays empty.)
    zk.suspendedTimer = zk.clock.setTimer(() => declareLost(zk), zk.session.sessionTimeoutMs());
  } else {
    // A new session: the old one's ephemeral nodes are gone with it.
    declareLost(zk);
    zk.abandoned.clear();
    zk.watch.refreshAll();
  }
}

// ---- the primitives ------------------------------------------------------------------------

async function tryAcquire(
  zk: Zk,
  contend: Contend,
  request: core.AcquireRequest,
): Promise<core.AcquireResult> {
  assertOpen(zk, 'acquire');
  const { name, owner } = request;
  const limit = budget('acquire', zk.commandTimeoutMs);
  const ttlMs = Math.max(request.ttlMs, capabilities.minTtlMs);
  const outcome = await contend(limit, Object.assign({}, request, { ttlMs }));
  if (outcome.kind === 'granted') {
    noteGranted(zk, name, owner, outcome.path, outcome.token);
    return {
      granted: true,
      grant: { name, owner, token: outcome.token, ttlMs: outcome.ttlMs ?? ttlMs },
    };
  }
  if (outcome.kind === 'conflict') return { granted: false, conflict: outcome.conflict };
  if (outcome.kind === 'delayed') {
    const left = outcome.lockDelayRemainingMs;
    return { granted: false, ttlRemainingMs: left, lockDelayRemainingMs: left };
  }
  zk.watch.noteHeld(name);
  return outcome.kind === 'held'
    ? { granted: false, ttlRemainingMs: outcome.ttlRemainingMs }
    : { granted: false };
}

async function release(zk: Zk, { name, token, keyHash }: core.HolderProof): Promise<boolean> {
  assertOpen(zk, 'release');
  const limit = budget('release', zk.commandTimeoutMs);
  // A lease granted here: one multi-op on its known path and version (fails if it changed
  // elsewhere), so the key hash compared is the one at that version.
  const own = zk.store.ownLease(name, token);
  if (own && !proves(own, token, keyHash)) return false;
  if (own && (await zk.handOver(limit, name, own))) return true;
  if (own && (await zk.store.endLease(limit, name, own, 'released'))) return true;
  for (;;) {
    const holder = await zk.store.holderByToken(limit, name, token);
    if (!holder || !proves(holder, token, keyHash)) return false;
    if (await zk.store.endLease(limit, name, holder, 'released')) return true;
  }
}

async function extend(
  zk: Zk,
  { name, token, ttlMs, keyHash }: core.HolderProof & { ttlMs: number },
): Promise<core.Grant | null> {
  assertOpen(zk, 'extend');
  const limit = budget('extend', zk.commandTimeoutMs);
  ttlMs = Math.max(ttlMs, capabilities.minTtlMs);
  // A lease granted or extended here is tried at its known path and version first.
  let known = zk.store.ownLease(name, token);
  for (;;) {
    const holder = known ?? (await zk.store.holderByToken(limit, name, token));
    known = undefined;
    if (!holder || !proves(holder, token, keyHash)) return null;
    const refreshed = await zk.store.refresh(limit, name, holder, ttlMs);
    if (!refreshed) continue;
    if (refreshed.expired) {
      // The old lease had already run out by the time of the write: not ours to extend.
      await zk.store.endLease(
        limit,
        name,
        Object.assign({}, holder, { version: refreshed.version }),
        'expired',
      );
      return null;
    }
    const { holdRemainingMs } = refreshed;
    const grant = { name, owner: holder.owner, token, ttlMs: refreshed.ttlMs };
    return holdRemainingMs === undefined ? grant : Object.assign({}, grant, { holdRemainingMs });
  }
}

async function inspect(zk: Zk, name: string): Promise<core.LockState | null> {
  assertOpen(zk, 'inspect');
  const limit = budget('inspect', zk.commandTimeoutMs);
  const { holders } = await zk.store.allHolders(limit, name);
  if (!holders.length) return null;
  return stateOf(name, holders, await zk.store.zkNow(limit));
}

async function revoke(zk: Zk, name: string): Promise<boolean> {
  assertOpen(zk, 'revoke');
  const limit = budget('revoke', zk.commandTimeoutMs);
  for (;;) {
    // Every holder in one multi-op: a revoke ends all of them or (one changed) none.
    const { holders } = await zk.store.allHolders(limit, name);
    if (!holders.length) return false;
    if (await zk.store.endAll(limit, name, holders, 'revoked')) return true;
  }
}

/**
 * How long `name`'s lock-delay has left on ZooKeeper's clock: 0 while a lease runs. An expired
 * holder nobody has ended yet starts its delay at its deadline (the end marker an end writes
 * records the same); after an end, the name node's marker tells (`delayEndOf`).
 */
async function lockDelayOf(zk: Zk, name: string): Promise<number> {
  assertOpen(zk, 'inspect');
  const limit = budget('inspect', zk.commandTimeoutMs);
  const node = await zk.store.nameNode(limit, name);
  if (!node) return 0;
  const { holders } =
    node.numChildren > 0 ? await zk.store.allHolders(limit, name) : { holders: [] };
  const ends = holders
    .filter((holder) => holder.mode === 'exclusive' && holder.lockDelayMs)
    .map((holder) => holder.mtimeMs + holder.ttlMs + holder.lockDelayMs!);
  const endsAt = Math.max(delayEndOf(node) ?? 0, ...ends);
  // No delay to measure: no need of ZooKeeper's time (a write).
  if (endsAt === 0) return 0;
  const nowMs = await zk.store.zkNow(limit);
  if (holders.some((holder) => holder.mtimeMs + holder.ttlMs > nowMs)) return 0;
  return Math.max(0, Math.ceil(endsAt - nowMs));
}

async function list(zk: Zk, namePrefix: string): Promise<core.LockState[]> {
  assertOpen(zk, 'list');
  const limit = budget('list', zk.commandTimeoutMs);
  let parents: string[];
  try {
    ({ children: parents } = await zk.session.getChildren(limit, zk.paths.locks));
  } catch (error) {
    if (isZkCode(error, Exception.NO_NODE)) return [];
    throw error;
  }
  const names = parents.map(zk.paths.nameOf).filter((name) => name.startsWith(namePrefix));
  const nowMs = await zk.store.zkNow(limit);
  const states = await Promise.all(
    names.map(async (name) =>
      stateOf(name, (await zk.store.allHolders(limit, name)).holders, nowMs),
    ),
  );
  return states.filter((state) => state !== null);
}

/**
 * What inspect and list report: every holder whose lease still runs on ZooKeeper's clock, in
 * token order, with its own remaining lease (core's holder view tells from it which one ended),
 * and at the top level the newest of them; nothing when none runs.
 */
function stateOf(name: string, all: Current[], nowMs: number): core.LockState | null {
  const live = all
    .map((holder) => ({ holder, remaining: holder.mtimeMs + holder.ttlMs - nowMs }))
    .filter(({ remaining }) => remaining > 0);
  const newest = live[live.length - 1];
  if (!newest) return null;
  const { holder } = newest;
  const top = {
    name,
    owner: holder.owner,
    token: holder.token,
    ttlRemainingMs: capped(newest.remaining),
  };
  if (holder.mode === 'exclusive' && live.length === 1)
    return Object.assign({}, top, { mode: 'exclusive' as const });
  return Object.assign({}, top, {
    mode: holder.mode,
    ...(holder.mode === 'shared' ? { limit: holder.limit } : {}),
    holders: live.map(({ holder: each, remaining }) => ({
      owner: each.owner,
      token: each.token,
      ttlRemainingMs: capped(remaining),
    })),
  });
}
