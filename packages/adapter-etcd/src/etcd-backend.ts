import type * as core from '@dlm/core';
import { DlmError, decideGrant, systemClock } from '@dlm/core';
import type { Etcd3, IKeyValue, IRequestOp, ITxnResponse } from 'etcd3';
import { type TxnSender, txnSender } from './etcd-batch.js';
import { type Budget, budget, type RetryMode, withRetries } from './etcd-calls.js';
import { createEtcdClient } from './etcd-client.js';
import {
  carryDelay,
  delayLease,
  delayLeftMs,
  detachPrevious,
  keepDelay,
  noDelay,
  readDelay,
} from './etcd-delay.js';
import { type GrantLeaseContext, refreshHolder } from './etcd-grant-lease.js';
import { capOfRequest, clampedGrant } from './etcd-hold-cap.js';
import { askValue, type EtcdKeys, etcdKeys, prefixEnd } from './etcd-keys.js';
import { type LeasePool, type LockLease, leasePool, ttlSeconds } from './etcd-leases.js';
import { etcdQueue } from './etcd-queue.js';
import { NEVER } from './etcd-queue-txn.js';
import { aheadOfView, ruleHoldersOf, takenByAnother } from './etcd-queue-view.js';
import { waiterSession } from './etcd-session.js';
import {
  noSharedHolder,
  type SharedRequest,
  sharedGrantCompares,
  sharedReads,
  sharedRefreshCompares,
  sharedView,
} from './etcd-shared.js';
import {
  hasKeyHash,
  holderValue,
  isOwnValue,
  keyHashCompares,
  limitOfValue,
  ownerOfValue,
  sharedValue,
  uncappedCompares,
} from './etcd-value.js';
import { type PrefixWatch, watchPrefix } from './etcd-watch.js';

export interface EtcdBackendOptions {
  /**
   * An etcd3 client to use. The adapter does not close it, and its fault-handling policies
   * apply on top of the adapter's own bound (prefer letting the adapter create the client).
   */
  client?: Etcd3;
  /** Client URLs, used when no `client` is given. Default `['http://127.0.0.1:2379']`. */
  endpoints?: string[];
  /** Every key the adapter writes starts with this. Default `dlm/`. */
  prefix?: string;
  /**
   * The longest one primitive (acquire, release, extend, inspect…) may take, retries
   * included, before it rejects with UNAVAILABLE. Default 2000.
   */
  commandTimeoutMs?: number;
  /**
   * etcd's shortest lease: 1.5 election timeouts rounded up to whole seconds, so 2000 with
   * etcd's default 1 s election timeout. Shorter requests are raised to it (and every grant
   * reports the TTL etcd actually granted). Set it when the cluster runs another election
   * timeout.
   */
  minTtlMs?: number;
  /**
   * The TTL of the lease that waiters' queue keys are attached to, kept alive while the dlm
   * server runs: when a server dies or stalls, its waiters leave every queue within this time
   * (until then the waiters behind them wait too). Whole seconds, at least `minTtlMs`.
   * Default 5000.
   */
  waiterLeaseTtlMs?: number;
  /** Times the wait for the watch stream before a first write. Default `systemClock`. */
  clock?: core.Clock;
  /**
   * The wall clock (ms since the epoch) caps on holding are kept by: a grant writes its cap as
   * this clock's time, and every dlm server on the cluster clamps by its own (etcd-hold-cap.ts),
   * so the servers' clocks must agree. Default `Date.now`.
   */
  wallClock?: () => number;
}

const SECOND = 1_000;

/**
 * etcd reports a lease's remaining time in whole seconds, rounded down; the true remainder is
 * below the next second. Report that upper end (never more than the lease granted), so a waiter
 * does not ask again before the holder's lease can have ended.
 */
function remainingMs(ttl: string, grantedTtl: string): number {
  const seconds = Number(ttl);
  if (seconds < 0) return 0;
  return Math.min((seconds + 1) * SECOND, Math.max(Number(grantedTtl), 1) * SECOND);
}

/**
 * A dlm backend on etcd v3.
 *
 * Each lock is one key, `<prefix>lock/<name>`, whose value is the owner, attached to a lease
 * of the requested TTL (whole seconds). The fencing token is the key's create revision: Raft
 * orders all revisions, so every later grant has a higher token, across expiry, release,
 * member crashes and leader changes. Every primitive is one transaction guarded by the create
 * revision. Waiters queue in etcd itself (`queue`, etcd-queue.ts), so FIFO holds across
 * dlm servers; they are woken by one watch on the prefix.
 *
 * @example
 * const backend = etcdBackend({ endpoints: ['http://127.0.0.1:2379'] });
 * const service = createLockService({ backend });
 */
export function etcdBackend(options: EtcdBackendOptions = {}): core.LockBackend {
  const keys = etcdKeys(options.prefix ?? 'dlm/');
  const commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  const ownClient = options.client === undefined;
  const client = options.client ?? createEtcdClient(options.endpoints ?? ['http://127.0.0.1:2379']);
  const watch = watchPrefix(client, keys);
  const capabilities: core.BackendCapabilities = {
    fencing: 'strict',
    minTtlMs: options.minTtlMs ?? 2_000,
    ttlGranularityMs: SECOND,
    durableAcrossRestart: true,
    fairQueue: true,
    expiryEvents: true,
    sharedModes: true,
    lockDelay: true,
    // A wall-clock cap in the lock key's value, clamping every write that moves the key to a new
    // lease (etcd-hold-cap.ts).
    maxHold: true,
  };
  const session = waiterSession(
    client,
    ttlSeconds(Math.max(options.waiterLeaseTtlMs ?? 5_000, capabilities.minTtlMs)),
    commandTimeoutMs,
  );
  const leases = leasePool(client, commandTimeoutMs);
  const wallClock = options.wallClock ?? Date.now;
  // These and the queue's callbacks run only once `e` below is assigned.
  const txn = (limit: Budget, mode: RetryMode, request: TxnRequest) =>
    sendTxn(e, limit, mode, request);

  const queue = etcdQueue({
    client,
    keys,
    watch,
    session,
    commandTimeoutMs,
    minTtlMs: capabilities.minTtlMs,
    isClosed: () => e.closed,
    leases,
    wallClock,
    remainingOfLease: (limit, lease) => remainingOfLease(e, limit, lease),
    watchEstablished: (limit) => watchEstablished(e, limit),
    txn,
  });
  const e: Etcd = {
    client,
    keys,
    watch,
    leases,
    sender: txnSender(client, keys.markerKey),
    clock: options.clock ?? systemClock,
    commandTimeoutMs,
    capabilities,
    grants: { leases, commandTimeoutMs, wallClock, txn },
    closed: false,
    releasing: queue.releasing,
  };

  return {
    kind: 'etcd',
    capabilities,
    tryAcquire: (request) =>
      request.mode === 'shared' ? tryAcquireShared(e, request) : tryAcquire(e, request),
    release: (proof) => release(e, proof),
    extend: (request) => extend(e, request),
    inspect: (name) => inspect(e, name),
    queue: queue.queue,
    // Only the event: the watch's second argument (the lease) is for the queue.
    watch: (name, listener) => watch.subscribe(name, (event) => listener(event)),
    revoke: (name) => revoke(e, name),
    requestRelease: (name, reason) => requestRelease(e, name, reason),
    lockDelayOf: (name) => lockDelayOf(e, name),
    list: (namePrefix) => list(e, namePrefix),
    async close() {
      if (e.closed) return;
      e.closed = true;
      await queue.close();
      leases.close();
      await session.close();
      await watch.close();
      if (ownClient) client.close();
    },
  };
}

type TxnRequest = Parameters<Etcd3['kv']['txn']>[0];

/** What the primitives of one etcd backend share. */
interface Etcd {
  readonly client: Etcd3;
  readonly keys: EtcdKeys;
  readonly watch: PrefixWatch;
  readonly leases: LeasePool;
  readonly sender: TxnSender;
  readonly clock: core.Clock;
  readonly commandTimeoutMs: number;
  readonly capabilities: core.BackendCapabilities;
  /** What a write that moves a held key to a new lease needs (etcd-grant-lease.ts). */
  readonly grants: GrantLeaseContext;
  closed: boolean;
  /** A release of `name` was sent: the queue's head here may send its grant right behind it. */
  readonly releasing: (name: string) => void;
}

function assertOpen(e: Etcd, what: string): void {
  if (e.closed) throw new DlmError('UNAVAILABLE', `${what}: the etcd backend is closed`);
}

function sendTxn(
  e: Etcd,
  limit: Budget,
  mode: RetryMode,
  request: TxnRequest,
): Promise<ITxnResponse> {
  return withRetries(limit, mode, true, (deadline) => e.client.kv.txn(request, { deadline }));
}

async function remainingOfLease(
  e: Etcd,
  limit: Budget,
  lease: string,
): Promise<number | undefined> {
  if (!lease || lease === '0') return undefined;
  try {
    const response = await withRetries(limit, 'idempotent', false, (deadline) =>
      e.client.leaseClient.leaseTimeToLive({ ID: lease }, { deadline }),
    );
    return remainingMs(response.TTL, response.grantedTTL);
  } catch {
    return undefined;
  }
}

/** Waits for the watch stream before the first write, so no later event can be missed. */
async function watchEstablished(e: Etcd, limit: Budget): Promise<void> {
  let timer: core.Timer | undefined;
  try {
    await Promise.race([
      e.watch.ready(),
      new Promise<never>((_, reject) => {
        timer = e.clock.setTimer(
          () => reject(new DlmError('UNAVAILABLE', `${limit.what}: etcd watch not established`)),
          Math.max(0, limit.remainingMs()),
        );
      }),
    ]);
  } finally {
    timer?.cancel();
  }
}

function stateOf(e: Etcd, limit: Budget, name: string, kv: IKeyValue): Promise<core.LockState> {
  return remainingOfLease(e, limit, kv.lease).then((ttl) => ({
    name,
    owner: ownerOfValue(kv.value),
    token: BigInt(kv.create_revision),
    ttlRemainingMs: ttl ?? 0,
  }));
}

/**
 * One transaction: create the key if absent, no shared holder holds the name and nobody queues
 * for it (a try-lock never jumps the queue); else, if the same owner holds it with the same key
 * hash and no cap on holding (the value `own` holds all three), move it to the new lease
 * (keeping its create revision, hence its token); else read the holder (a capped lease of ours
 * is then moved by a clamping write: `moveHeld`). Sending it twice is harmless, so it may be
 * retried after a lost reply. `value`: what a fresh grant writes (with its cap, if any).
 */
function tryAcquireTxn(
  e: Etcd,
  { name, owner, keyHash, lockDelayMs = 0 }: core.AcquireRequest,
  { value, own }: { value: Buffer; own: Buffer },
  leaseId: string,
  delayLeaseId: string | undefined,
): TxnRequest {
  const key = e.keys.lock(name);
  const waiters = e.keys.queue(name);
  const delay = keepDelay(e.keys, name, lockDelayMs, delayLeaseId);
  return {
    compare: [
      { key, target: 'Create', result: 'Equal', create_revision: 0 },
      noSharedHolder(e.keys, name),
      // Not in a lock-delay (etcd-delay.ts).
      noDelay(e.keys, name),
      // Over a range: true when no key in it has a create revision, i.e. none exists.
      {
        key: waiters,
        range_end: prefixEnd(waiters),
        target: 'Create',
        result: 'Equal',
        create_revision: 0,
      },
    ],
    success: [{ request_put: { key, value, lease: leaseId } }, ...(lockDelayMs > 0 ? [delay] : [])],
    failure: [
      {
        request_txn: {
          compare: [{ key, target: 'Value', result: 'Equal', value: own }],
          success: [{ request_put: { key, value: own, lease: leaseId, prev_kv: true } }, delay],
          failure: [
            { request_range: { key } },
            // Our own shared holder key: held in the other mode, a conflict.
            {
              request_range: { key: e.keys.sharedHolder(name, owner, keyHash), keys_only: true },
            },
            readDelay(e.keys, name),
          ],
        },
      },
    ],
  };
}

/** Sends a write made on leases; a failure known not to have applied hands them back. */
async function onLease<T>(
  e: Etcd,
  leaseIds: string | readonly (string | undefined)[],
  write: () => Promise<T>,
): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (!(error instanceof DlmError && error.details.indeterminate)) {
      for (const id of typeof leaseIds === 'string' ? [leaseIds] : leaseIds) e.leases.detached(id);
    }
    throw error;
  }
}

async function tryAcquire(e: Etcd, request: core.AcquireRequest): Promise<core.AcquireResult> {
  assertOpen(e, 'acquire');
  const limit = budget('acquire', e.commandTimeoutMs);
  await watchEstablished(e, limit);
  // Again when our own capped lease ended at its cap (then granted afresh) or changed meanwhile.
  while (limit.remainingMs() > 0) {
    const result = await tryAcquireOnce(e, limit, request);
    if (result !== 'again') return result;
  }
  throw new DlmError('UNAVAILABLE', 'acquire: etcd did not answer in time');
}

async function tryAcquireOnce(
  e: Etcd,
  limit: Budget,
  request: core.AcquireRequest,
): Promise<core.AcquireResult | 'again'> {
  const { name, owner, ttlMs, keyHash } = request;
  const lease = await e.leases.take(limit, Math.max(ttlMs, e.capabilities.minTtlMs));
  const delayMs = request.lockDelayMs ?? 0;
  // Taken once the lock's lease runs, so that it ends no earlier than that lease plus the delay.
  const delay =
    delayMs > 0
      ? await onLease(e, lease.id, () => delayLease(e.leases, limit, delayMs, lease.ttlMs))
      : undefined;
  // Counted from before the transaction, once the lease runs: never later than the grant.
  const cap = capOfRequest(request, e.grants.wallClock());
  const own = holderValue(owner, keyHash);
  const value = cap ? holderValue(owner, keyHash, cap) : own;
  const txn = tryAcquireTxn(e, request, { value, own }, lease.id, delay?.id);
  const response = await onLease(e, [lease.id, delay?.id], () =>
    e.sender.send(limit, 'idempotent', name, txn),
  );
  const grant = (token: bigint): core.Grant => ({
    name,
    owner,
    token,
    ...clampedGrant(lease.ttlMs, undefined, cap?.maxHoldMs),
  });
  if (response.succeeded) return { granted: true, grant: grant(BigInt(response.header.revision)) };
  const nested = response.responses[0]?.response_txn;
  if (nested?.succeeded) {
    const previous = nested.responses[0]?.response_put.prev_kv;
    if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
    if (previous.lease !== lease.id) e.leases.detached(previous.lease);
    detachPrevious(e.leases, nested.responses[1], delay?.id);
    return { granted: true, grant: grant(BigInt(previous.create_revision)) };
  }
  e.leases.detached(lease.id);
  e.leases.detached(delay?.id);
  const holder = nested?.responses[0]?.response_range.kvs[0];
  if (holder && isOwnValue(holder.value, owner, keyHash)) {
    // Ours, with a cap on holding: the first grant's cap holds.
    const refreshed = await moveHeld(e, limit, name, holder, ttlMs);
    return refreshed ? { granted: true, grant: refreshed } : 'again';
  }
  if (!holder && nested?.responses[1]?.response_range.kvs.length) {
    return { granted: false, conflict: { field: 'mode' } };
  }
  const delayed = holder ? undefined : nested?.responses[2]?.response_range.kvs[0];
  if (delayed) {
    const left = delayLeftMs(delayed, await remainingOfLease(e, limit, delayed.lease));
    return { granted: false, ttlRemainingMs: left, lockDelayRemainingMs: left };
  }
  const ttlRemainingMs = holder
    ? await remainingOfLease(e, limit, holder.lease)
    : await latestSharedEnd(e, limit, name);
  return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
}

/**
 * The exclusive holder read as `kv` (its create revision the token) moves to a lease of `ttlMs`
 * by a clamping write (`refreshHolder`): up to its cap on holding, if it has one. Undefined when
 * it was at or past its cap (it is ended) or changed since the read.
 */
async function moveHeld(
  e: Etcd,
  limit: Budget,
  name: string,
  kv: IKeyValue,
  ttlMs: number,
): Promise<core.Grant | undefined> {
  const leaseTtlMs = Math.max(ttlMs, e.capabilities.minTtlMs);
  const refreshed = await refreshHolder(
    e.grants,
    limit,
    leaseTtlMs,
    kv,
    undefined,
    e.keys.delay(name),
  );
  if (refreshed === undefined || refreshed === 'capped') return undefined;
  detachPrevious(e.leases, refreshed.response.responses[0], refreshed.lease.lease.id);
  const owner = ownerOfValue(kv.value);
  return { name, owner, token: BigInt(kv.create_revision), ...refreshed.granted };
}

/**
 * When shared holders keep an exclusive request out, the latest of their ends (each holder is on
 * its own lease); undefined when none is left or etcd cannot say.
 */
async function latestSharedEnd(e: Etcd, limit: Budget, name: string): Promise<number | undefined> {
  const start = e.keys.shared(name);
  const holders = await withRetries(limit, 'idempotent', false, (deadline) =>
    e.client.kv.range({ key: start, range_end: prefixEnd(start) }, { deadline }),
  );
  const leases = new Set(holders.kvs.map((kv) => kv.lease));
  const ends = await Promise.all([...leases].map((lease) => remainingOfLease(e, limit, lease)));
  const known = ends.filter((end) => end !== undefined);
  return known.length > 0 ? Math.max(...known) : undefined;
}

function readTxn(e: Etcd, limit: Budget, success: IRequestOp[]): Promise<ITxnResponse> {
  return withRetries(limit, 'idempotent', false, (deadline) =>
    e.client.kv.txn({ compare: [], success, failure: [] }, { deadline }),
  );
}

const sharedRequestOf = (request: core.AcquireRequest): SharedRequest => ({
  name: request.name,
  owner: request.owner,
  keyHash: request.keyHash,
  limit: request.limit ?? 1,
});

/**
 * A shared try-lock (see etcd-shared.ts): read the name, decide, and grant (or refresh) in a
 * transaction whose comparisons keep the decision true; read again when they fail. It never
 * jumps the queue: it is granted only when a request queued now would be at once (no exclusive
 * entry queued, room for the queued shared ones too), and the grant requires the queue to be
 * unchanged since the read.
 */
async function tryAcquireShared(
  e: Etcd,
  request: core.AcquireRequest,
): Promise<core.AcquireResult> {
  assertOpen(e, 'acquire');
  const limit = budget('acquire', e.commandTimeoutMs);
  await watchEstablished(e, limit);
  const shared = sharedRequestOf(request);
  const { name, owner } = request;
  const waiters = e.keys.queue(name);
  const holderKey = e.keys.sharedHolder(name, owner, request.keyHash);
  const value = sharedValue(shared.limit, owner);
  let lease: LockLease | undefined;
  try {
    while (limit.remainingMs() > 0) {
      const read = await readTxn(e, limit, [
        ...sharedReads(e.keys, shared),
        { request_range: { key: waiters, range_end: prefixEnd(waiters), keys_only: true } },
        readDelay(e.keys, name),
      ]);
      const view = sharedView(read.responses, 0, read.header.revision);
      const delayed = read.responses[4]?.response_range.kvs[0];
      const entries = (read.responses[3]?.response_range.kvs ?? []).map((kv) => kv.key.toString());
      // Granted at once exactly when a queued request would be: every queued entry counts as
      // ahead of it (core's rule: an exclusive one, or a shared one with another limit, comes
      // first, and the shared ones take room).
      const rule = { mode: 'shared' as const, limit: shared.limit };
      const holders = Object.assign({}, view, { sharedCount: view.holders });
      const decision = takenByAnother(view, request)
        ? undefined
        : decideGrant(
            rule,
            ruleHoldersOf(Object.assign({}, holders, { delay: delayed }), request),
            aheadOfView(rule, entries),
          );
      if (decision?.kind === 'conflict') return { granted: false, conflict: decision.conflict };
      if (decision?.kind === 'wait' && decision.on === 'delay' && delayed) {
        const left = delayLeftMs(delayed, await remainingOfLease(e, limit, delayed.lease));
        return { granted: false, ttlRemainingMs: left, lockDelayRemainingMs: left };
      }
      if (decision === undefined || decision.kind === 'wait') {
        const by = decision === undefined ? view.mine : (view.lock ?? view.oldest);
        const ttlRemainingMs = by ? await remainingOfLease(e, limit, by.lease) : undefined;
        return ttlRemainingMs === undefined
          ? { granted: false }
          : { granted: false, ttlRemainingMs };
      }
      lease ??= await e.leases.take(limit, Math.max(request.ttlMs, e.capabilities.minTtlMs));
      const leaseId = lease.id;
      const compare =
        decision.kind === 'refresh'
          ? sharedRefreshCompares(view.mine!)
          : [
              ...sharedGrantCompares(e.keys, name, view),
              noDelay(e.keys, name),
              // Nobody joined the queue since the read (an exclusive waiter would be ahead).
              {
                key: waiters,
                range_end: prefixEnd(waiters),
                target: 'Mod' as const,
                result: 'Less' as const,
                mod_revision: (BigInt(view.revision) + 1n).toString(),
              },
            ];
      const response = await onLease(e, leaseId, () =>
        sendTxn(e, limit, 'idempotent', {
          compare,
          success: [{ request_put: { key: holderKey, value, lease: leaseId, prev_kv: true } }],
          failure: [],
        }),
      );
      if (!response.succeeded) continue;
      const granted = lease;
      lease = undefined;
      const previous = response.responses[0]?.response_put.prev_kv;
      if (previous && previous.lease !== granted.id) e.leases.detached(previous.lease);
      const token = BigInt(previous ? previous.create_revision : response.header.revision);
      return { granted: true, grant: { name, owner, token, ttlMs: granted.ttlMs } };
    }
    throw new DlmError('UNAVAILABLE', 'acquire: etcd did not answer in time');
  } finally {
    if (lease) e.leases.detached(lease.id);
  }
}

const markerPut = (e: Etcd, value: 'released' | 'revoked') => ({
  request_put: { key: Buffer.from(e.keys.markerKey), value: Buffer.from(value) },
});

/** The shared holder key of `name` created at `token` (for a token-only release or extend). */
async function sharedKeyOfToken(
  e: Etcd,
  limit: Budget,
  name: string,
  token: bigint,
): Promise<Buffer | undefined> {
  const start = e.keys.shared(name);
  const response = await withRetries(limit, 'idempotent', false, (deadline) =>
    e.client.kv.range(
      {
        key: start,
        range_end: prefixEnd(start),
        min_create_revision: token.toString(),
        max_create_revision: token.toString(),
        keys_only: true,
      },
      { deadline },
    ),
  );
  return response.kvs[0]?.key;
}

const createdAt = (key: Buffer, token: bigint) => ({
  key,
  target: 'Create' as const,
  result: 'Equal' as const,
  create_revision: token.toString(),
});

/**
 * One transaction for both modes (a release does not say which): the lock key if it is ours,
 * else the shared holder key named by our key hash if it is ours. A release without a key hash
 * (an operator's, by token only) that finds no exclusive holder looks the shared one up by its
 * create revision first.
 */
async function release(e: Etcd, { name, token, keyHash }: core.HolderProof): Promise<boolean> {
  assertOpen(e, 'release');
  const limit = budget('release', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  const sharedKey = keyHash === undefined ? undefined : e.keys.sharedHolder(name, '', keyHash);
  const sent = e.sender.send(
    limit,
    'once',
    name,
    {
      compare: [createdAt(key, token), ...keyHashCompares(key, keyHash)],
      // A release ends the lease with no lock-delay.
      success: [
        { request_delete_range: { key, prev_kv: true } },
        { request_delete_range: { key: e.keys.delay(name), prev_kv: true } },
      ],
      failure: sharedKey
        ? [
            {
              request_txn: {
                compare: [createdAt(sharedKey, token)],
                success: [{ request_delete_range: { key: sharedKey, prev_kv: true } }],
                failure: [],
              },
            },
          ]
        : [],
    },
    true,
  );
  e.releasing(name);
  const response = await sent;
  if (response.succeeded) {
    e.leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
    detachPrevious(e.leases, response.responses[1], undefined);
    return true;
  }
  const nested = response.responses[0]?.response_txn;
  if (nested?.succeeded) {
    e.leases.detached(nested.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
    return true;
  }
  if (keyHash !== undefined) return false;
  const byToken = await sharedKeyOfToken(e, limit, name, token);
  if (!byToken) return false;
  const deleted = await sendTxn(e, limit, 'once', {
    compare: [createdAt(byToken, token)],
    success: [{ request_delete_range: { key: byToken, prev_kv: true } }, markerPut(e, 'released')],
    failure: [],
  });
  if (!deleted.succeeded) return false;
  e.leases.detached(deleted.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
  return true;
}

async function extend(
  e: Etcd,
  { name, token, ttlMs, keyHash }: core.HolderProof & { ttlMs: number },
): Promise<core.Grant | null> {
  assertOpen(e, 'extend');
  const limit = budget('extend', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  const sharedKey = keyHash === undefined ? undefined : e.keys.sharedHolder(name, '', keyHash);
  // An etcd lease can only be renewed to the TTL it was granted with, so a new TTL means a
  // new lease: move the key onto it (a put keeps the key's create revision, so the token).
  const lease = await e.leases.take(limit, Math.max(ttlMs, e.capabilities.minTtlMs));
  const moveTo = (target: Buffer) => ({
    request_put: { key: target, lease: lease.id, ignore_value: true, prev_kv: true },
  });
  const response = await onLease(e, lease.id, () =>
    sendTxn(e, limit, 'idempotent', {
      // Moved here only without a cap on holding; a capped lease (and any, for a token-only
      // extend, which cannot tell from the value) is read and moved by a clamping write.
      compare: [
        createdAt(key, token),
        ...(keyHash === undefined ? [NEVER(key)] : uncappedCompares(key, keyHash)),
      ],
      success: [moveTo(key), readDelay(e.keys, name)],
      failure: [
        { request_range: { key } },
        ...(sharedKey
          ? [
              {
                request_txn: {
                  compare: [createdAt(sharedKey, token)],
                  success: [moveTo(sharedKey)],
                  failure: [],
                },
              },
            ]
          : []),
      ],
    }),
  );
  let previous: IKeyValue | undefined;
  if (response.succeeded) {
    previous = response.responses[0]?.response_put.prev_kv;
    // The lease's lock-delay starts at its new end (etcd-delay.ts).
    const delayed = response.responses[1]?.response_range.kvs[0];
    if (delayed) await carryDelay(delayContext(e), limit, delayed, lease.ttlMs);
  } else {
    const held = response.responses[0]?.response_range.kvs[0];
    if (held?.create_revision === token.toString() && hasKeyHash(held.value, keyHash)) {
      e.leases.detached(lease.id);
      // Up to its cap on holding; at or past it the lease ends here (etcd-hold-cap.ts).
      return (await moveHeld(e, limit, name, held, ttlMs)) ?? null;
    }
    const nested = response.responses[1]?.response_txn;
    if (nested?.succeeded) previous = nested.responses[0]?.response_put.prev_kv;
    else if (keyHash === undefined) {
      const byToken = await sharedKeyOfToken(e, limit, name, token);
      const moved = byToken
        ? await onLease(e, lease.id, () =>
            sendTxn(e, limit, 'idempotent', {
              compare: [createdAt(byToken, token)],
              success: [moveTo(byToken)],
              failure: [],
            }),
          )
        : undefined;
      if (moved?.succeeded) previous = moved.responses[0]?.response_put.prev_kv;
      else {
        e.leases.detached(lease.id);
        return null;
      }
    } else {
      e.leases.detached(lease.id);
      return null;
    }
  }
  if (previous && previous.lease !== lease.id) e.leases.detached(previous.lease);
  return { name, owner: previous ? ownerOfValue(previous.value) : '', token, ttlMs: lease.ttlMs };
}

/** The state of a name held by shared holders (`kvs`, ordered by create revision). */
async function sharedStateOf(
  e: Etcd,
  limit: Budget,
  name: string,
  kvs: IKeyValue[],
): Promise<core.LockState> {
  // Holders often share nothing, but a lease is asked about once however many keys hang on it.
  const leases = new Map<string, Promise<number | undefined>>();
  const holders = await Promise.all(
    kvs.map(async (kv) => {
      let ttl = leases.get(kv.lease);
      if (!ttl) {
        ttl = remainingOfLease(e, limit, kv.lease);
        leases.set(kv.lease, ttl);
      }
      return {
        owner: ownerOfValue(kv.value),
        token: BigInt(kv.create_revision),
        ttlRemainingMs: (await ttl) ?? 0,
      };
    }),
  );
  holders.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
  const last = holders[holders.length - 1]!;
  return {
    name,
    ...last,
    mode: 'shared',
    limit: limitOfValue(kvs[kvs.length - 1]!.value),
    holders,
  };
}

const sortedByCreate = { sort_order: 'Ascend', sort_target: 'Create' } as const;

async function inspect(e: Etcd, name: string): Promise<core.LockState | null> {
  assertOpen(e, 'inspect');
  const limit = budget('inspect', e.commandTimeoutMs);
  const start = e.keys.shared(name);
  // One read-only transaction: both modes at one revision.
  const response = await readTxn(e, limit, [
    { request_range: { key: e.keys.lock(name) } },
    { request_range: { key: start, range_end: prefixEnd(start), ...sortedByCreate } },
  ]);
  const kv = response.responses[0]?.response_range.kvs[0];
  if (kv) return stateOf(e, limit, name, kv);
  const holders = response.responses[1]?.response_range.kvs ?? [];
  return holders.length ? sharedStateOf(e, limit, name, holders) : null;
}

/** A put of the ask key (see `etcd-keys.ts`): every server's watch of the prefix hears it. */
async function requestRelease(e: Etcd, name: string, reason: string | undefined): Promise<void> {
  assertOpen(e, 'requestRelease');
  const request = { key: Buffer.from(e.keys.askKey), value: askValue(name, reason) };
  await withRetries(budget('requestRelease', e.commandTimeoutMs), 'once', true, (deadline) =>
    e.client.kv.put(request, { deadline }),
  );
}

/** Ends every holder of the name, exclusive or shared, in one revision marked `revoked`. */
async function revoke(e: Etcd, name: string): Promise<boolean> {
  assertOpen(e, 'revoke');
  const limit = budget('revoke', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  const start = e.keys.shared(name);
  const holders = { key: start, range_end: prefixEnd(start) };
  const response = await sendTxn(e, limit, 'once', {
    compare: [{ key, target: 'Create', result: 'Greater', create_revision: 0 }],
    success: [
      { request_delete_range: { key, prev_kv: true } },
      markerPut(e, 'revoked'),
      readDelay(e.keys, name),
    ],
    failure: [
      {
        request_txn: {
          // Over a range: true when every key in it has a create revision and one exists.
          compare: [{ target: 'Create', result: 'Greater', create_revision: 0, ...holders }],
          success: [
            { request_delete_range: { prev_kv: true, ...holders } },
            markerPut(e, 'revoked'),
          ],
          failure: [],
        },
      },
    ],
  });
  const deleted = response.succeeded
    ? response.responses[0]?.response_delete_range
    : response.responses[0]?.response_txn.succeeded
      ? response.responses[0].response_txn.responses[0]?.response_delete_range
      : undefined;
  if (!deleted) return false;
  for (const lease of new Set(deleted.prev_kvs.map((kv) => kv.lease))) e.leases.detached(lease);
  // The lease's lock-delay runs from the revocation: on a lease taken after it answered. A
  // failure leaves the key on its old lease, which ends later still.
  const delayed = response.succeeded ? response.responses[2]?.response_range.kvs[0] : undefined;
  if (delayed) {
    await carryDelay(delayContext(e), budget('revoke', e.commandTimeoutMs), delayed).catch(
      () => {},
    );
  }
  return true;
}

const delayContext = (e: Etcd) => ({
  leases: e.leases,
  txn: (limit: Budget, mode: RetryMode, request: TxnRequest) => sendTxn(e, limit, mode, request),
});

/** How long `name`'s lock-delay has left: 0 while held, and when its delay key is gone. */
async function lockDelayOf(e: Etcd, name: string): Promise<number> {
  assertOpen(e, 'inspect');
  const limit = budget('inspect', e.commandTimeoutMs);
  const start = e.keys.shared(name);
  const response = await readTxn(e, limit, [
    { request_range: { key: e.keys.lock(name), keys_only: true } },
    { request_range: { key: start, range_end: prefixEnd(start), count_only: true } },
    readDelay(e.keys, name),
  ]);
  const held =
    (response.responses[0]?.response_range.kvs.length ?? 0) > 0 ||
    Number(response.responses[1]?.response_range.count ?? 0) > 0;
  const kv = response.responses[2]?.response_range.kvs[0];
  if (held || !kv) return 0;
  return delayLeftMs(kv, await remainingOfLease(e, limit, kv.lease));
}

async function list(e: Etcd, namePrefix: string): Promise<core.LockState[]> {
  assertOpen(e, 'list');
  const limit = budget('list', e.commandTimeoutMs);
  const { lockPrefix, sharedPrefix } = e.keys;
  const start = Buffer.from(lockPrefix + namePrefix);
  const sharedStart = Buffer.from(sharedPrefix + namePrefix);
  const response = await readTxn(e, limit, [
    { request_range: { key: start, range_end: prefixEnd(start) } },
    { request_range: { key: sharedStart, range_end: prefixEnd(sharedStart), ...sortedByCreate } },
  ]);
  const exclusive = (response.responses[0]?.response_range.kvs ?? []).map((kv) =>
    stateOf(e, limit, kv.key.toString().slice(lockPrefix.length), kv),
  );
  const byName = new Map<string, IKeyValue[]>();
  for (const kv of response.responses[1]?.response_range.kvs ?? []) {
    const name = e.keys.nameOfSharedKey(kv.key.toString());
    if (name === undefined) continue;
    const kvs = byName.get(name) ?? [];
    kvs.push(kv);
    byName.set(name, kvs);
  }
  const shared = [...byName].map(([name, kvs]) => sharedStateOf(e, limit, name, kvs));
  const states = await Promise.all([...exclusive, ...shared]);
  return states.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
