import {
  checkCommonOptions,
  createCommandConnection,
  createLockEvents,
  createRedisNode,
  createSubscriberConnection,
  databaseOf,
  type LockEvents,
  type NodeAcquireResult,
  newRequestId,
  type RedisNode,
  sharedLimit,
  subscribedWithin,
  within,
} from '@dlm/adapter-redis';
import type * as core from '@dlm/core';
import { backoffDelayMs, DlmError, sleep, systemClock, toUnavailable } from '@dlm/core';
import type { Redis } from 'ioredis';
import {
  answers,
  firstError,
  type Gathered,
  gather,
  kthSmallest,
  maxToken,
  type Outcome,
} from './quorum.js';

export interface RedlockBackendOptions {
  /** One URL per independent Redis node (`redis://host:port[/db]`). Not replicas of each other. */
  urls?: string[];
  /** Or your own ioredis clients, one per node (they stay yours; see adapter-redis for settings). */
  clients?: Redis[];
  /** Put in front of every key and every event channel. Default `dlm:`. */
  prefix?: string;
  /** The longest any call to one node may take. Default 2000. */
  commandTimeoutMs?: number;
  /** Clock drift allowed per ms of lease (Redlock's `driftFactor`). Default 0.01. */
  driftFactor?: number;
  /**
   * Round-trip time the nodes' leases are lengthened by, so that a grant that took at most
   * this long still has a validity of at least the requested ttl. Default 100.
   */
  latencyAllowanceMs?: number;
  /**
   * How long each node keeps a name's last token after the lease, in ms (see adapter-redis).
   * Default 60000.
   */
  fenceRetentionMs?: number;
  /**
   * How long one acquire may take over the nodes, in ms. Its copies on the nodes live this long
   * until the grant is labelled with its token, so the copies of an attempt whose dlm server died
   * half-way run out after it (not after the lease's ttl), and a contender refused by such a split
   * waits at most this long for it to clear. Default 500.
   */
  acquireAttemptMs?: number;
  clock?: core.Clock;
}

export interface RedlockBackend extends core.LockBackend {
  /** Resolves once a quorum of nodes' event subscriptions is in place; UNAVAILABLE otherwise. */
  ready(): Promise<void>;
  /** How many nodes must agree: ⌊N/2⌋+1. */
  readonly quorum: number;
}

const CAPABILITIES: core.BackendCapabilities = Object.freeze({
  // Independent nodes share no counter: see the README for what the token promises.
  fencing: 'best-effort',
  minTtlMs: 1,
  ttlGranularityMs: 1,
  durableAcrossRestart: false,
  fairQueue: false,
  // Each node expires its copy on its own; core checks each lease at its end instead.
  expiryEvents: false,
  // Each holder, shared or exclusive, is a lease on a quorum of nodes (the same node scripts).
  sharedModes: true,
  // Each node keeps the lease's delay beside its copy (the same node scripts); it holds while a
  // quorum of nodes keeps it.
  lockDelay: true,
  maxHold: true,
});

/**
 * A dlm backend running the Redlock algorithm over N independent Redis nodes: a lock is held
 * when a majority of the nodes hold it, for the validity left after the time the grant took
 * and the allowed clock drift. Survives the loss of a minority of nodes; fencing tokens are
 * best-effort (see the README).
 *
 * @example
 * const backend = redlockBackend({ urls: ['redis://a:6379', 'redis://b:6379', 'redis://c:6379'] });
 * await backend.ready();
 */
export function redlockBackend(options: RedlockBackendOptions): RedlockBackend {
  const { prefix, commandTimeoutMs, fenceRetentionMs } = checkCommonOptions(options);
  const clock = options.clock ?? systemClock;
  const driftFactor = options.driftFactor ?? 0.01;
  const allowanceMs = options.latencyAllowanceMs ?? 100;
  const attemptMs = options.acquireAttemptMs ?? 500;
  checkRedlockOptions(options, driftFactor, attemptMs);
  const ownsClients = options.clients === undefined;
  const clients =
    options.clients ??
    (options.urls ?? []).map((url) => createCommandConnection(url, commandTimeoutMs));
  if (clients.length === 0) {
    throw new DlmError('INVALID_PARAMS', 'redlock needs at least one Redis node', {
      field: 'urls',
    });
  }
  const nodes: RedisNode[] = clients.map((client) =>
    // Grants are announced after the quorum (adoptToken), with the token the caller gets.
    createRedisNode({
      client,
      prefix,
      commandTimeoutMs,
      clock,
      publishAcquired: false,
      fenceRetentionMs,
    }),
  );
  const total = nodes.length;
  const quorum = Math.floor(total / 2) + 1;

  const events = createLockEvents({
    prefix,
    sources: clients.map((client) => ({
      subscriber: createSubscriberConnection(client, commandTimeoutMs),
      db: databaseOf(client),
    })),
    keyspace: false,
    mode: 'quorum',
    clock,
    sourcesNeeded: quorum,
    // A node's stream was down: wake every waiter, who will ask for itself.
    onResubscribed: () => {
      for (const name of events.watchedNames()) events.deliver({ name, type: 'released' });
    },
  });
  const r: Redlock = {
    nodes,
    events,
    clock,
    total,
    quorum,
    driftFactor,
    allowanceMs,
    attemptMs,
    commandTimeoutMs,
    closed: false,
  };

  return {
    kind: 'redlock',
    capabilities: CAPABILITIES,
    quorum,
    ready: () => ready(r),
    tryAcquire: (request) => tryAcquire(r, request),
    release: (proof) => release(r, proof),
    extend: (request) => extend(r, request),
    inspect: (name) => inspect(r, name),
    lockDelayOf: (name) => lockDelayOf(r, name),
    revoke: (name) => revoke(r, name),
    requestRelease: (name, reason) => requestRelease(r, name, reason),
    list: (namePrefix) => list(r, namePrefix),
    watch: (name, listener) => events.watch(name, listener),
    async close() {
      if (r.closed) return;
      r.closed = true;
      await events.close();
      for (const node of nodes) node.detach();
      // disconnect, not QUIT: a stalled node would never answer QUIT.
      if (ownsClients) for (const client of clients) client.disconnect();
    },
  };
}

function checkRedlockOptions(
  options: RedlockBackendOptions,
  driftFactor: number,
  attemptMs: number,
): void {
  if (!(Number.isInteger(attemptMs) && attemptMs >= 10 && attemptMs <= 60_000)) {
    throw new DlmError(
      'INVALID_PARAMS',
      `acquireAttemptMs must be a whole number of ms from 10 to 60000, got ${attemptMs}`,
      { field: 'acquireAttemptMs' },
    );
  }
  if (!(driftFactor >= 0 && driftFactor < 0.5)) {
    throw new DlmError('INVALID_PARAMS', 'driftFactor must be in [0, 0.5)', {
      field: 'driftFactor',
    });
  }
  if (options.urls && options.clients) {
    throw new DlmError('INVALID_PARAMS', 'give urls or clients, not both', { field: 'urls' });
  }
}

/** What the primitives of one Redlock backend share. */
interface Redlock {
  readonly nodes: RedisNode[];
  readonly events: LockEvents;
  readonly clock: core.Clock;
  readonly total: number;
  /** How many nodes must agree: ⌊N/2⌋+1. */
  readonly quorum: number;
  readonly driftFactor: number;
  readonly allowanceMs: number;
  /** How long an acquire's copies live on the nodes until its grant is labelled. */
  readonly attemptMs: number;
  readonly commandTimeoutMs: number;
  closed: boolean;
}

// ---- Redlock's arithmetic ------------------------------------------------------------------
// The nodes are asked for a lease a little longer than the caller's ttl, so that after the time
// the grant took (up to the allowance) and the clock drift, the validity is still at least the
// ttl asked for: the contract promises a lease ≥ the request.

const drift = (r: Redlock, ttlMs: number) => ttlMs * r.driftFactor + 2;

const nodeTtl = (r: Redlock, ttlMs: number) =>
  Math.ceil((ttlMs + r.allowanceMs + 2) / (1 - r.driftFactor));

const validity = (r: Redlock, ttlOnNodes: number, startedAt: number) =>
  ttlOnNodes - (r.clock.now() - startedAt) - drift(r, ttlOnNodes);

/**
 * A lease's remaining time as its holder counts it, from what the nodes have left: less the
 * drift and the latency allowance that the nodes' copies outlast the lease by. Once that is
 * used up but the copies still stand, their own time is what a waiter has to wait.
 */
function leaseLeft(r: Redlock, nodeMs: number): number {
  const left = Math.floor(nodeMs - drift(r, nodeMs) - r.allowanceMs);
  return left > 0 ? left : nodeMs;
}

function unavailable<T>(
  r: Redlock,
  what: string,
  outcomes: ReadonlyArray<Outcome<T> | undefined>,
): DlmError {
  const answered = answers(outcomes).length;
  return toUnavailable(
    firstError(outcomes) ?? new Error('no answer'),
    `${what}: only ${answered} of ${r.total} Redis nodes answered (${r.quorum} needed)`,
  );
}

function assertOpen(r: Redlock): void {
  if (r.closed) throw new DlmError('UNAVAILABLE', 'the Redlock backend is closed');
}

// ---- the primitives ------------------------------------------------------------------------

async function ready(r: Redlock): Promise<void> {
  assertOpen(r);
  const { quorum, total, commandTimeoutMs } = r;
  const connected = await Promise.allSettled(r.nodes.map((node) => node.whenConnected()));
  if (connected.filter((result) => result.status === 'fulfilled').length < quorum) {
    throw toUnavailable(
      new Error(`fewer than ${quorum} of ${total} nodes connected within ${commandTimeoutMs} ms`),
      'redlock backend',
    );
  }
  if (!(await within(r.clock, r.events.subscribed, commandTimeoutMs))) {
    throw toUnavailable(
      new Error(`fewer than ${quorum} of ${total} nodes subscribed within ${commandTimeoutMs} ms`),
      'redlock backend',
    );
  }
}

type NodeAttempt = Gathered<NodeAcquireResult>;

/** Past `acquireAttemptMs`: by then a split's copies have run out on the nodes' clocks. */
const SPLIT_MARGIN_MS = 50;
/** The pause between rounds of a split vote: up to 2 ms, doubling to 32 ms, jittered. */
const SPLIT_BACKOFF = { initialDelayMs: 2, maxDelayMs: 32 };

/**
 * Redlock's try-lock, answered only from what a quorum says. An acquire takes the nodes one by
 * one, so a refusal can come from another acquire still under way, whose copies no quorum
 * agrees on yet. Answering LOCK_HELD then, while readers see no holder, is no order a single
 * lock could have (the fault harness's linearizability check found it). So a refusal is given
 * once a quorum agrees on a holder; while the copies are split it waits for them to settle (a
 * grant, or copies given back or run out: then it tries again). An attempt's copies live
 * `acquireAttemptMs` until its grant is labelled, so the wait ends by then.
 */
async function tryAcquire(r: Redlock, request: core.AcquireRequest): Promise<core.AcquireResult> {
  assertOpen(r);
  const settleBy = r.clock.now() + r.attemptMs + SPLIT_MARGIN_MS;
  for (let round = 1; ; round += 1) {
    const result = await attemptAcquire(r, request);
    if (result.granted || result.conflict) return result;
    const settled = await splitSettled(r, request, settleBy);
    if (settled !== 'free' || r.clock.now() > settleBy) return result;
    // Contenders that split the vote all see it settle at once: a random pause, growing with
    // each round, lets one of them take a quorum next time (Redlock's own retry advice).
    await sleep(r.clock, backoffDelayMs(SPLIT_BACKOFF, round));
  }
}

/**
 * After a refusal: 'held' once a quorum agrees on a holder, 'free' once no other owner's copy
 * is left (try again), 'split' when the bound passes first or no quorum answers.
 */
async function splitSettled(
  r: Redlock,
  { name, owner }: core.AcquireRequest,
  settleBy: number,
): Promise<'held' | 'free' | 'split'> {
  let pauseMs = 1;
  for (;;) {
    const read = gather(
      r.nodes,
      (node) => node.inspect(name),
      (so) => so.filter((o) => o !== undefined).length >= r.quorum,
    );
    const states = answers(await read.early);
    if (states.length < r.quorum) return 'split';
    if (agreed(name, states, r.quorum, (nodeMs) => nodeMs) !== null) return 'held';
    // Our own copies are being given back: they are no contender's.
    if (
      !states.some((state) => state !== null && holdersOf(state).some((h) => h.owner !== owner))
    ) {
      return 'free';
    }
    if (r.clock.now() + pauseMs > settleBy) return 'split';
    await sleep(r.clock, pauseMs);
    pauseMs = Math.min(pauseMs * 2, 32);
  }
}

async function attemptAcquire(
  r: Redlock,
  { name, owner, ttlMs, keyHash, mode, limit: asked, lockDelayMs, maxHoldMs }: core.AcquireRequest,
): Promise<core.AcquireResult> {
  assertOpen(r);
  const { nodes, quorum, total } = r;
  const limit = sharedLimit(mode, asked);
  await subscribedWithin(r.clock, r.events, r.commandTimeoutMs, r.clock.now(), name);
  // The lease's validity runs from the first node's command, after the wait for the name's
  // channel (a SUBSCRIBE round trip on a quorum the first time a name is used here).
  const startedAt = r.clock.now();
  const onNodes = nodeTtl(r, ttlMs);
  const run = gather(
    nodes,
    (node) =>
      node.acquire(
        name,
        owner,
        keyHash,
        onNodes,
        startedAt,
        Math.min(onNodes, r.attemptMs),
        limit,
        lockDelayMs,
        maxHoldMs,
      ),
    (outcomes) => {
      const granted = outcomes.filter((o) => o?.ok && o.value.granted).length;
      const refused = outcomes.filter((o) => o && !(o.ok && o.value.granted)).length;
      return granted >= quorum || refused > total - quorum;
    },
  );
  const outcomes = await run.early;
  const valid = validity(r, onNodes, startedAt);
  const grants = answers(outcomes).flatMap((g) => (g.granted ? [g] : []));
  if (grants.length >= quorum && valid > 0) {
    // The nodes hold a capped lease no longer than its cap (their copies would outlast it), and
    // refresh a capped lease only up to its cap (each says how long it refreshed it for).
    const refreshed = grants.flatMap((g) => g.ttlMs ?? []);
    const held = Math.min(onNodes, maxHoldMs ?? onNodes, ...refreshed);
    return labelGrant(r, { name, owner, keyHash }, grants, run, held, startedAt);
  }
  // Not granted: give back what we took, on every node, including stragglers that answer
  // later. A refreshed lease (this owner already held it there) is left alone.
  giveBack(r, run, (node, outcome) => node.release(name, outcome.token, keyHash));
  if (grants.length >= quorum) {
    throw new DlmError(
      'UNAVAILABLE',
      `acquire: the quorum answered after the lease's validity had run out (${Math.round(
        r.clock.now() - startedAt,
      )} ms)`,
    );
  }
  const refusals = answers(outcomes).flatMap((g) => (g.granted ? [] : [g]));
  if (refusals.length + grants.length < quorum) throw unavailable(r, 'acquire', outcomes);
  // Never grantable as asked: only when a quorum says so (a minority may hold a stale copy).
  const conflicts = refusals.flatMap((g) => (g.conflict ? [g.conflict] : []));
  if (conflicts.length >= quorum) return { granted: false, conflict: conflicts[0]! };
  const held = refusals.flatMap((g) => (g.conflict ? [] : [g.ttlRemainingMs]));
  // The lock frees for us once enough of the holders' copies expire to leave a quorum.
  const nodeMs = kthSmallest(held, quorum - grants.length);
  if (nodeMs === undefined) return { granted: false };
  const ttlRemainingMs = leaseLeft(r, nodeMs);
  // In its lock-delay when so many nodes keep a delay that no quorum can grant.
  const delayed = refusals.filter((g) => !g.conflict && g.lockDelayRemainingMs !== undefined);
  if (delayed.length > total - quorum) {
    return { granted: false, ttlRemainingMs, lockDelayRemainingMs: ttlRemainingMs };
  }
  return { granted: false, ttlRemainingMs };
}

/** The name's lock-delay left: the longest one a quorum of nodes still keeps (0: none). */
async function lockDelayOf(r: Redlock, name: string): Promise<number> {
  assertOpen(r);
  const outcomes = await gather(
    r.nodes,
    (node) => node.lockDelayOf(name),
    (so) => answers(so).length >= r.quorum,
  ).early;
  const delays = answers(outcomes);
  if (delays.length < r.quorum) throw unavailable(r, 'inspect', outcomes);
  const kept = [...delays].sort((a, b) => b - a)[r.quorum - 1] ?? 0;
  return kept > 0 ? leaseLeft(r, kept) : 0;
}

/**
 * A quorum granted: label every node's copy with one token, and report the grant only once a
 * quorum carries it (until then the nodes hold the lease under their own counters, and a reader
 * would see a token nobody got).
 */
async function labelGrant(
  r: Redlock,
  { name, owner, keyHash }: Pick<core.AcquireRequest, 'name' | 'owner' | 'keyHash'>,
  grants: Array<NodeAcquireResult & { granted: true }>,
  run: NodeAttempt,
  onNodes: number,
  startedAt: number,
): Promise<core.AcquireResult> {
  const { quorum, total } = r;
  // The least bad token: the largest of the quorum's counters. Any two quorums share a
  // node, and adoptToken raises every node's counter to it, so tokens keep growing unless
  // a node forgets its data or misses the adoption.
  const token = maxToken(grants.map((g) => g.token));
  const announce = grants.some((g) => g.fresh);
  // The copies were taken for `acquireAttemptMs`; labelled, each lives until at least
  // startedAt + onNodes, as if taken for the whole lease.
  const leaseMs = onNodes - (r.clock.now() - startedAt);
  const adopted = await gather(
    r.nodes,
    (node) => node.adoptToken({ name, owner, keyHash, token, ttlMs: onNodes, announce, leaseMs }),
    (so) => so.filter((o) => o?.ok && o.value).length >= quorum,
  ).early;
  const labelled = answers(adopted).filter(Boolean).length;
  const left = validity(r, onNodes, startedAt);
  if (labelled >= quorum && left > 0) {
    return { granted: true, grant: { name, owner, token, ttlMs: Math.floor(left) } };
  }
  // Given back where this attempt took it (a refreshed lease of the same owner stays), under
  // the grant's token or the node's own; a node that does not answer may keep its copy
  // until it runs out.
  giveBack(r, run, (node, outcome) => {
    node.release(name, token, keyHash).catch(() => {});
    if (outcome.token !== token) return node.release(name, outcome.token, keyHash);
    return Promise.resolve(false);
  });
  throw new DlmError(
    'UNAVAILABLE',
    `acquire: only ${labelled} of ${total} Redis nodes took the grant's token in time (${quorum} needed)`,
    { indeterminate: true },
  );
}

/** On each node where this attempt took a fresh lease (whenever it answers), runs `release`. */
function giveBack(
  r: Redlock,
  run: NodeAttempt,
  release: (node: RedisNode, outcome: NodeAcquireResult & { granted: true }) => Promise<unknown>,
): void {
  r.nodes.forEach((node, index) => {
    void run.each[index]!.then((outcome) => {
      if (outcome.ok && outcome.value.granted && outcome.value.fresh) {
        release(node, outcome.value).catch(() => {});
      }
    });
  });
}

async function release(r: Redlock, { name, token, keyHash }: core.HolderProof): Promise<boolean> {
  assertOpen(r);
  // One node that held this token (with this key hash: each node compares it in its own
  // script) is enough to say it was ours; a quorum that did not hold
  // it says it was not. The answer waits for a quorum either way: until then a quorum may
  // still hold the token, and a read right after the release would report its holder. A
  // stalled minority does not hold the answer up.
  const outcomes = await gather(
    r.nodes,
    (node) => node.release(name, token, keyHash),
    (so) => so.filter((o) => o?.ok).length >= r.quorum,
  ).early;
  const released = answers(outcomes);
  if (released.some(Boolean)) return true;
  if (released.length >= r.quorum) return false;
  throw unavailable(r, 'release', outcomes);
}

async function extend(
  r: Redlock,
  { name, token, ttlMs, keyHash }: core.HolderProof & { ttlMs: number },
): Promise<core.Grant | null> {
  assertOpen(r);
  const { quorum, total } = r;
  const startedAt = r.clock.now();
  const onNodes = nodeTtl(r, ttlMs);
  const run = gather(
    r.nodes,
    (node) => node.extend(name, token, keyHash, onNodes, startedAt),
    (outcomes) => {
      const extended = outcomes.filter((o) => o?.ok && o.value !== null).length;
      const refused = outcomes.filter((o) => o && !(o.ok && o.value !== null)).length;
      return extended >= quorum || refused > total - quorum;
    },
  );
  const outcomes = await run.early;
  const valid = validity(r, onNodes, startedAt);
  const extended = answers(outcomes).flatMap((one) => (one === null ? [] : [one]));
  if (extended.length >= quorum) {
    // Each node clamps to the lease's cap on holding, by its own clock: the lease lasts as long
    // as the quorum's shortest copy, and reaches its cap when the first node says it does.
    const nodeMs = kthSmallest(
      extended.map((one) => one.ttlMs),
      extended.length - quorum + 1,
    )!;
    const capped = nodeMs < onNodes;
    const left = capped ? validity(r, nodeMs, startedAt) : valid;
    const holds = extended.flatMap((one) => one.holdRemainingMs ?? []);
    const hold = holds.length > 0 ? { holdRemainingMs: Math.min(...holds) } : {};
    if (left > 0) {
      return { name, owner: extended[0]!.owner, token, ttlMs: Math.floor(left), ...hold };
    }
    if (capped) return null;
    throw new DlmError('UNAVAILABLE', 'extend: the quorum answered after the validity ran out');
  }
  if (answers(outcomes).length < quorum) throw unavailable(r, 'extend', outcomes);
  return null;
}

async function inspect(r: Redlock, name: string): Promise<core.LockState | null> {
  assertOpen(r);
  const { quorum } = r;
  const outcomes = await gather(
    r.nodes,
    (node) => node.inspect(name),
    (so) => {
      // Decided once one lease (owner and token) is on a quorum, or none can reach one.
      const counts = new Map<string, number>();
      for (const state of answers(so)) {
        if (state) counts.set(leaseKey(state), (counts.get(leaseKey(state)) ?? 0) + 1);
      }
      const pending = so.filter((o) => o === undefined).length;
      const best = Math.max(0, ...counts.values());
      return best >= quorum || (best + pending < quorum && answers(so).length >= quorum);
    },
  ).early;
  const states = answers(outcomes);
  if (states.length < quorum) throw unavailable(r, 'inspect', outcomes);
  return agreed(name, states, quorum, (nodeMs) => leaseLeft(r, nodeMs));
}

async function revoke(r: Redlock, name: string): Promise<boolean> {
  assertOpen(r);
  const outcomes = await gather(
    r.nodes,
    (node) => node.revoke(name),
    (so) => so.filter((o) => o?.ok).length >= r.quorum,
  ).early;
  const revoked = answers(outcomes);
  if (revoked.some((g) => g !== null)) return true;
  if (revoked.length >= r.quorum) return false;
  throw unavailable(r, 'revoke', outcomes);
}

/**
 * Published on a quorum of nodes, with one id: every watcher subscribes to a quorum, so at least
 * one of its nodes carries the request, and the id makes the other copies duplicates.
 */
async function requestRelease(r: Redlock, name: string, reason: string | undefined) {
  assertOpen(r);
  const id = newRequestId();
  const outcomes = await gather(
    r.nodes,
    (node) => node.requestRelease(name, reason, id),
    (so) => so.filter((o) => o?.ok).length >= r.quorum,
  ).early;
  if (answers(outcomes).length < r.quorum) throw unavailable(r, 'requestRelease', outcomes);
}

async function list(r: Redlock, namePrefix: string): Promise<core.LockState[]> {
  assertOpen(r);
  const outcomes = await Promise.all(
    gather(
      r.nodes,
      (node) => node.list(namePrefix),
      () => false,
    ).each,
  );
  const lists = answers(outcomes);
  if (lists.length < r.quorum) throw unavailable(r, 'list', outcomes);
  const byName = new Map<string, Array<core.LockState | null>>();
  for (const states of lists) {
    for (const state of states) byName.set(state.name, [...(byName.get(state.name) ?? []), state]);
  }
  return [...byName.entries()].flatMap(([name, states]) => {
    const state = agreed(name, states, r.quorum, (nodeMs) => leaseLeft(r, nodeMs));
    return state ? [state] : [];
  });
}

/** One lease on a node: its owner and the token it is labelled with there. */
function leaseKey(state: core.LockState): string {
  return `${state.token}:${state.owner}`;
}

/** A node's holders of a name (its one holder, for an exclusive lock). */
function holdersOf(state: core.LockState): core.HolderState[] {
  return (
    state.holders ?? [
      { owner: state.owner, token: state.token, ttlRemainingMs: state.ttlRemainingMs },
    ]
  );
}

/**
 * The leases a quorum of nodes agrees on, owner and token alike (one exclusive lease, or the
 * shared holders each on a quorum, ordered by token, the highest at the top), each with the
 * time left until fewer than a quorum hold it; null when no lease is on a quorum. A node's copy
 * that disagrees (a failed attempt's partial grant, a copy not yet relabelled with the grant's
 * token) is never reported: nobody was granted what only a minority holds.
 */
function agreed(
  name: string,
  states: ReadonlyArray<core.LockState | null>,
  quorum: number,
  leaseLeft: (nodeMs: number) => number,
): core.LockState | null {
  const byLease = new Map<string, { holder: core.HolderState; shared: boolean; ms: number[] }>();
  const limits: number[] = [];
  for (const state of states) {
    if (!state) continue;
    const shared = state.mode === 'shared';
    if (shared && state.limit !== undefined) limits.push(state.limit);
    for (const holder of holdersOf(state)) {
      const key = `${shared ? 's' : 'x'}:${holder.token}:${holder.owner}`;
      const seen = byLease.get(key) ?? { holder, shared, ms: [] };
      seen.ms.push(holder.ttlRemainingMs);
      byLease.set(key, seen);
    }
  }
  const onQuorum = [...byLease.values()]
    .filter((lease) => lease.ms.length >= quorum)
    .map(({ holder, shared, ms }) => ({
      shared,
      holder: {
        owner: holder.owner,
        token: holder.token,
        ttlRemainingMs: leaseLeft(ms.sort((a, b) => b - a)[quorum - 1] ?? 0),
      },
    }));
  const exclusive = onQuorum.find((lease) => !lease.shared);
  if (exclusive) return { name, ...exclusive.holder };
  const holders = onQuorum
    .map((lease) => lease.holder)
    .sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
  const top = holders.at(-1);
  if (!top) return null;
  return { name, ...top, mode: 'shared', limit: Math.max(...limits), holders };
}
