import type * as core from '@dlm/core';
import { DlmError, systemClock } from '@dlm/core';
import type { Etcd3, IKeyValue, ITxnResponse } from 'etcd3';
import { type TxnSender, txnSender } from './etcd-batch.js';
import { type Budget, budget, type RetryMode, withRetries } from './etcd-calls.js';
import { createEtcdClient } from './etcd-client.js';
import { type EtcdKeys, etcdKeys, prefixEnd } from './etcd-keys.js';
import { type LeasePool, leasePool, ttlSeconds } from './etcd-leases.js';
import { fairQueue } from './etcd-queue.js';
import { waiterSession } from './etcd-session.js';
import { holderValue, keyHashCompares, ownerOfValue } from './etcd-value.js';
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
 * revision. Waiters queue in etcd itself (`acquireQueued`, etcd-queue.ts), so FIFO holds across
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
  };
  const session = waiterSession(
    client,
    ttlSeconds(Math.max(options.waiterLeaseTtlMs ?? 5_000, capabilities.minTtlMs)),
    commandTimeoutMs,
  );
  const leases = leasePool(client, commandTimeoutMs);
  // These and the queue's callbacks run only once `e` below is assigned.
  const remainingOf = (limit: Budget, kv: IKeyValue) => remainingOfLease(e, limit, kv.lease);
  const txn = (limit: Budget, mode: RetryMode, request: TxnRequest) =>
    sendTxn(e, limit, mode, request);

  const queue = fairQueue({
    client,
    keys,
    watch,
    session,
    commandTimeoutMs,
    minTtlMs: capabilities.minTtlMs,
    isClosed: () => e.closed,
    leases,
    remainingOf,
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
    closed: false,
    releasing: queue.releasing,
  };

  return {
    kind: 'etcd',
    capabilities,
    tryAcquire: (request) => tryAcquire(e, request),
    release: (proof) => release(e, proof),
    extend: (request) => extend(e, request),
    inspect: (name) => inspect(e, name),
    acquireQueued: queue.acquireQueued,
    // Only the event: the watch's second argument (the lease) is for the queue.
    watch: (name, listener) => watch.subscribe(name, (event) => listener(event)),
    revoke: (name) => revoke(e, name),
    list: (namePrefix) => list(e, namePrefix),
    async close() {
      if (e.closed) return;
      e.closed = true;
      queue.wakeAll();
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
 * One transaction: create the key if absent and nobody queues for it (a try-lock never jumps
 * the queue); else, if the same owner holds it with the same key hash (the value holds both),
 * move it to the new lease (keeping its create revision, hence its token); else read the
 * holder. Sending it twice is harmless, so it may be retried after a lost reply.
 */
function tryAcquireTxn(e: Etcd, name: string, value: Buffer, leaseId: string): TxnRequest {
  const key = e.keys.lock(name);
  const waiters = e.keys.queue(name);
  return {
    compare: [
      { key, target: 'Create', result: 'Equal', create_revision: 0 },
      // Over a range: true when no key in it has a create revision, i.e. none exists.
      {
        key: waiters,
        range_end: prefixEnd(waiters),
        target: 'Create',
        result: 'Equal',
        create_revision: 0,
      },
    ],
    success: [{ request_put: { key, value, lease: leaseId } }],
    failure: [
      {
        request_txn: {
          compare: [{ key, target: 'Value', result: 'Equal', value }],
          success: [{ request_put: { key, value, lease: leaseId, prev_kv: true } }],
          failure: [{ request_range: { key } }],
        },
      },
    ],
  };
}

/** Sends a write made on `lease`; a failure known not to have applied hands the lease back. */
async function onLease<T>(e: Etcd, leaseId: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (!(error instanceof DlmError && error.details.indeterminate)) e.leases.detached(leaseId);
    throw error;
  }
}

async function tryAcquire(
  e: Etcd,
  { name, owner, ttlMs, keyHash }: core.AcquireRequest,
): Promise<core.AcquireResult> {
  assertOpen(e, 'acquire');
  const limit = budget('acquire', e.commandTimeoutMs);
  await watchEstablished(e, limit);
  const value = holderValue(owner, keyHash);
  const lease = await e.leases.take(limit, Math.max(ttlMs, e.capabilities.minTtlMs));
  const request = tryAcquireTxn(e, name, value, lease.id);
  const response = await onLease(e, lease.id, () =>
    e.sender.send(limit, 'idempotent', name, request),
  );
  const grant = (token: bigint): core.Grant => ({ name, owner, token, ttlMs: lease.ttlMs });
  if (response.succeeded) return { granted: true, grant: grant(BigInt(response.header.revision)) };
  const nested = response.responses[0]?.response_txn;
  if (nested?.succeeded) {
    const previous = nested.responses[0]?.response_put.prev_kv;
    if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
    if (previous.lease !== lease.id) e.leases.detached(previous.lease);
    return { granted: true, grant: grant(BigInt(previous.create_revision)) };
  }
  e.leases.detached(lease.id);
  const holder = nested?.responses[0]?.response_range.kvs[0];
  const ttlRemainingMs = holder ? await remainingOfLease(e, limit, holder.lease) : undefined;
  return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
}

async function release(e: Etcd, { name, token, keyHash }: core.HolderProof): Promise<boolean> {
  assertOpen(e, 'release');
  const limit = budget('release', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  const sent = e.sender.send(
    limit,
    'once',
    name,
    {
      compare: [
        { key, target: 'Create', result: 'Equal', create_revision: token.toString() },
        ...keyHashCompares(key, keyHash),
      ],
      success: [{ request_delete_range: { key, prev_kv: true } }],
      failure: [],
    },
    true,
  );
  e.releasing(name);
  const response = await sent;
  if (!response.succeeded) return false;
  e.leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
  return true;
}

async function extend(
  e: Etcd,
  { name, token, ttlMs, keyHash }: core.HolderProof & { ttlMs: number },
): Promise<core.Grant | null> {
  assertOpen(e, 'extend');
  const limit = budget('extend', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  // An etcd lease can only be renewed to the TTL it was granted with, so a new TTL means a
  // new lease: move the key onto it (a put keeps the key's create revision, so the token).
  const lease = await e.leases.take(limit, Math.max(ttlMs, e.capabilities.minTtlMs));
  const response = await onLease(e, lease.id, () =>
    sendTxn(e, limit, 'idempotent', {
      compare: [
        { key, target: 'Create', result: 'Equal', create_revision: token.toString() },
        ...keyHashCompares(key, keyHash),
      ],
      success: [{ request_put: { key, lease: lease.id, ignore_value: true, prev_kv: true } }],
      failure: [],
    }),
  );
  if (!response.succeeded) {
    e.leases.detached(lease.id);
    return null;
  }
  const previous = response.responses[0]?.response_put.prev_kv;
  if (previous && previous.lease !== lease.id) e.leases.detached(previous.lease);
  return { name, owner: previous ? ownerOfValue(previous.value) : '', token, ttlMs: lease.ttlMs };
}

async function inspect(e: Etcd, name: string): Promise<core.LockState | null> {
  assertOpen(e, 'inspect');
  const limit = budget('inspect', e.commandTimeoutMs);
  const response = await withRetries(limit, 'idempotent', false, (deadline) =>
    e.client.kv.range({ key: e.keys.lock(name) }, { deadline }),
  );
  const kv = response.kvs[0];
  return kv ? stateOf(e, limit, name, kv) : null;
}

async function revoke(e: Etcd, name: string): Promise<boolean> {
  assertOpen(e, 'revoke');
  const limit = budget('revoke', e.commandTimeoutMs);
  const key = e.keys.lock(name);
  const response = await sendTxn(e, limit, 'once', {
    compare: [{ key, target: 'Create', result: 'Greater', create_revision: 0 }],
    success: [
      { request_delete_range: { key, prev_kv: true } },
      { request_put: { key: Buffer.from(e.keys.markerKey), value: Buffer.from('revoked') } },
    ],
    failure: [],
  });
  if (!response.succeeded) return false;
  e.leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
  return true;
}

async function list(e: Etcd, namePrefix: string): Promise<core.LockState[]> {
  assertOpen(e, 'list');
  const limit = budget('list', e.commandTimeoutMs);
  const { lockPrefix } = e.keys;
  const start = Buffer.from(lockPrefix + namePrefix);
  const response = await withRetries(limit, 'idempotent', false, (deadline) =>
    e.client.kv.range({ key: start, range_end: prefixEnd(start) }, { deadline }),
  );
  return Promise.all(
    response.kvs.map((kv) => stateOf(e, limit, kv.key.toString().slice(lockPrefix.length), kv)),
  );
}
