import {
  type AcquireResult,
  type BackendCapabilities,
  DlmError,
  type Grant,
  type LockBackend,
  type LockState,
} from '@dlm/core';
import type { Etcd3, IKeyValue, ITxnResponse } from 'etcd3';
import { txnSender } from './etcd-batch.js';
import { type Budget, budget, type RetryMode, withRetries } from './etcd-calls.js';
import { createEtcdClient } from './etcd-client.js';
import { etcdKeys, prefixEnd } from './etcd-keys.js';
import { leasePool, ttlSeconds } from './etcd-leases.js';
import { fairQueue } from './etcd-queue.js';
import { waiterSession } from './etcd-session.js';
import { holderValue, keyHashCompares, ownerOfValue } from './etcd-value.js';
import { watchPrefix } from './etcd-watch.js';

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
export function etcdBackend(options: EtcdBackendOptions = {}): LockBackend {
  const keys = etcdKeys(options.prefix ?? 'dlm/');
  const { lockPrefix, markerKey } = keys;
  const commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  const ownClient = options.client === undefined;
  const client = options.client ?? createEtcdClient(options.endpoints ?? ['http://127.0.0.1:2379']);
  const watch = watchPrefix(client, keys);
  let closed = false;

  const capabilities: BackendCapabilities = {
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

  const keyOf = keys.lock;

  function assertOpen(what: string): void {
    if (closed) throw new DlmError('UNAVAILABLE', `${what}: the etcd backend is closed`);
  }

  function call<T>(
    limit: Budget,
    mode: RetryMode,
    write: boolean,
    fn: (deadline: number) => Promise<T>,
  ): Promise<T> {
    return withRetries(limit, mode, write, fn);
  }

  const leases = leasePool(client, commandTimeoutMs);
  const sender = txnSender(client, markerKey);

  async function remainingOf(limit: Budget, kv: IKeyValue): Promise<number | undefined> {
    return remainingOfLease(limit, kv.lease);
  }

  async function remainingOfLease(limit: Budget, lease: string): Promise<number | undefined> {
    if (!lease || lease === '0') return undefined;
    try {
      const response = await call(limit, 'idempotent', false, (deadline) =>
        client.leaseClient.leaseTimeToLive({ ID: lease }, { deadline }),
      );
      return remainingMs(response.TTL, response.grantedTTL);
    } catch {
      return undefined;
    }
  }

  /** Waits for the watch stream before the first write, so no later event can be missed. */
  async function watchEstablished(limit: Budget): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        watch.ready(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new DlmError('UNAVAILABLE', `${limit.what}: etcd watch not established`)),
            Math.max(0, limit.remainingMs()),
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  function txn(
    limit: Budget,
    mode: RetryMode,
    request: Parameters<Etcd3['kv']['txn']>[0],
  ): Promise<ITxnResponse> {
    return call(limit, mode, true, (deadline) => client.kv.txn(request, { deadline }));
  }

  function stateOf(limit: Budget, name: string, kv: IKeyValue): Promise<LockState> {
    return remainingOf(limit, kv).then((ttl) => ({
      name,
      owner: ownerOfValue(kv.value),
      token: BigInt(kv.create_revision),
      ttlRemainingMs: ttl ?? 0,
    }));
  }

  const queue = fairQueue({
    client,
    keys,
    watch,
    session,
    commandTimeoutMs,
    minTtlMs: capabilities.minTtlMs,
    isClosed: () => closed,
    leases,
    remainingOf,
    remainingOfLease,
    watchEstablished,
    txn,
  });

  return {
    kind: 'etcd',
    capabilities,

    async tryAcquire({ name, owner, ttlMs, keyHash }): Promise<AcquireResult> {
      assertOpen('acquire');
      const limit = budget('acquire', commandTimeoutMs);
      await watchEstablished(limit);
      const key = keyOf(name);
      const value = holderValue(owner, keyHash);
      const lease = await leases.take(limit, Math.max(ttlMs, capabilities.minTtlMs));
      // One transaction: create the key if absent and nobody queues for it (a try-lock never
      // jumps the queue); else, if the same owner holds it with the same key hash (the value
      // holds both), move it to the new lease (keeping
      // its create revision, hence its token); else read the holder.
      // Sending it twice is harmless, so it may be retried after a lost reply.
      const waiters = keys.queue(name);
      let response: ITxnResponse;
      try {
        response = await sender.send(limit, 'idempotent', name, {
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
          success: [{ request_put: { key, value, lease: lease.id } }],
          failure: [
            {
              request_txn: {
                compare: [{ key, target: 'Value', result: 'Equal', value }],
                success: [{ request_put: { key, value, lease: lease.id, prev_kv: true } }],
                failure: [{ request_range: { key } }],
              },
            },
          ],
        });
      } catch (error) {
        if (!(error instanceof DlmError && error.details.indeterminate)) leases.detached(lease.id);
        throw error;
      }
      const grant = (token: bigint): Grant => ({ name, owner, token, ttlMs: lease.ttlMs });
      if (response.succeeded)
        return { granted: true, grant: grant(BigInt(response.header.revision)) };
      const nested = response.responses[0]?.response_txn;
      if (nested?.succeeded) {
        const previous = nested.responses[0]?.response_put.prev_kv;
        if (!previous) throw new DlmError('INTERNAL', 'etcd: re-acquire returned no previous key');
        if (previous.lease !== lease.id) leases.detached(previous.lease);
        return { granted: true, grant: grant(BigInt(previous.create_revision)) };
      }
      leases.detached(lease.id);
      const holder = nested?.responses[0]?.response_range.kvs[0];
      const ttlRemainingMs = holder ? await remainingOf(limit, holder) : undefined;
      return ttlRemainingMs === undefined ? { granted: false } : { granted: false, ttlRemainingMs };
    },

    async release({ name, token, keyHash }) {
      assertOpen('release');
      const limit = budget('release', commandTimeoutMs);
      const key = keyOf(name);
      const response = await sender.send(
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
      if (!response.succeeded) return false;
      leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
      return true;
    },

    async extend({ name, token, ttlMs, keyHash }) {
      assertOpen('extend');
      const limit = budget('extend', commandTimeoutMs);
      const key = keyOf(name);
      // An etcd lease can only be renewed to the TTL it was granted with, so a new TTL means a
      // new lease: move the key onto it (a put keeps the key's create revision, so the token).
      const lease = await leases.take(limit, Math.max(ttlMs, capabilities.minTtlMs));
      let response: ITxnResponse;
      try {
        response = await txn(limit, 'idempotent', {
          compare: [
            { key, target: 'Create', result: 'Equal', create_revision: token.toString() },
            ...keyHashCompares(key, keyHash),
          ],
          success: [{ request_put: { key, lease: lease.id, ignore_value: true, prev_kv: true } }],
          failure: [],
        });
      } catch (error) {
        if (!(error instanceof DlmError && error.details.indeterminate)) leases.detached(lease.id);
        throw error;
      }
      if (!response.succeeded) {
        leases.detached(lease.id);
        return null;
      }
      const previous = response.responses[0]?.response_put.prev_kv;
      if (previous && previous.lease !== lease.id) leases.detached(previous.lease);
      return {
        name,
        owner: previous ? ownerOfValue(previous.value) : '',
        token,
        ttlMs: lease.ttlMs,
      };
    },

    async inspect(name) {
      assertOpen('inspect');
      const limit = budget('inspect', commandTimeoutMs);
      const response = await call(limit, 'idempotent', false, (deadline) =>
        client.kv.range({ key: keyOf(name) }, { deadline }),
      );
      const kv = response.kvs[0];
      return kv ? stateOf(limit, name, kv) : null;
    },

    acquireQueued: queue.acquireQueued,

    watch(name, listener) {
      // Only the event: the watch's second argument (the lease) is for the queue.
      return watch.subscribe(name, (event) => listener(event));
    },

    async revoke(name) {
      assertOpen('revoke');
      const limit = budget('revoke', commandTimeoutMs);
      const key = keyOf(name);
      const response = await txn(limit, 'once', {
        compare: [{ key, target: 'Create', result: 'Greater', create_revision: 0 }],
        success: [
          { request_delete_range: { key, prev_kv: true } },
          { request_put: { key: Buffer.from(markerKey), value: Buffer.from('revoked') } },
        ],
        failure: [],
      });
      if (!response.succeeded) return false;
      leases.detached(response.responses[0]?.response_delete_range.prev_kvs[0]?.lease);
      return true;
    },

    async list(namePrefix) {
      assertOpen('list');
      const limit = budget('list', commandTimeoutMs);
      const start = Buffer.from(lockPrefix + namePrefix);
      const response = await call(limit, 'idempotent', false, (deadline) =>
        client.kv.range({ key: start, range_end: prefixEnd(start) }, { deadline }),
      );
      return Promise.all(
        response.kvs.map((kv) => stateOf(limit, kv.key.toString().slice(lockPrefix.length), kv)),
      );
    },

    async close() {
      if (closed) return;
      closed = true;
      queue.wakeAll();
      leases.close();
      await session.close();
      await watch.close();
      if (ownClient) client.close();
    },
  };
}
