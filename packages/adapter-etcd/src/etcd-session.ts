import { boundedCall, type Clock, DlmError, settlesWithin, systemClock } from '@dlm/core';
import type { Etcd3, Lease } from 'etcd3';
import type { Budget } from './etcd-calls.js';

/**
 * The lease every waiter key of one backend is attached to, like a session of etcd's own
 * `concurrency` package: kept alive while the dlm server runs, so a waiter's place in a queue
 * lasts as long as it waits; when the server dies (or stalls) the keepalives stop and etcd
 * deletes its waiters' keys within the lease's TTL, so a dead server's waiters never block a
 * queue for longer than that. One lease for all waiters keeps the keepalive traffic constant.
 */
export interface WaiterSession {
  /** The lease's id, granted on first use (and again after the previous one was lost). */
  leaseId(limit: Budget): Promise<string>;
  /** etcd said this lease is gone (it ran out while the server stalled): grant a new one. */
  invalidate(id: string): void;
  /** Revokes the lease: every waiter key still attached to it goes at once. */
  close(): Promise<void>;
}

interface Current {
  lease: Lease;
  id: Promise<string>;
}

/** `clock`: where close's time limit is set (a lease id waits on the caller's budget's clock). */
export function waiterSession(
  client: Etcd3,
  ttlSeconds: number,
  commandTimeoutMs: number,
  clock: Clock = systemClock,
): WaiterSession {
  let current: Current | undefined;
  let closed = false;

  function start(): Current {
    // etcd3's Lease keeps the lease alive on one stream (every TTL/3, as etcd's Go client
    // does), reconnects that stream after errors, and reports `lost` once etcd says the lease
    // is gone or nothing was renewed for two TTLs.
    const lease = client.lease(ttlSeconds, {
      deadline: new Date(Date.now() + commandTimeoutMs),
    });
    const entry: Current = { lease, id: lease.grant() };
    const forget = () => {
      if (current === entry) current = undefined;
    };
    lease.on('lost', forget);
    entry.id.catch(forget);
    return entry;
  }

  return {
    async leaseId(limit) {
      if (closed) throw new DlmError('UNAVAILABLE', `${limit.what}: the etcd backend is closed`);
      current ??= start();
      const entry = current;
      try {
        return await boundedCall(limit.what, Math.max(0, limit.remainingMs()), () => entry.id, {
          clock: limit.clock,
          timeoutError: () => new Error('deadline exceeded (client side)'),
        });
      } catch (error) {
        throw new DlmError('UNAVAILABLE', `${limit.what}: no waiter lease from etcd`, {
          cause: error,
        });
      }
    },
    invalidate(id) {
      const entry = current;
      if (!entry) return;
      void entry.id.then((currentId) => {
        if (currentId !== id || current !== entry) return;
        current = undefined;
        entry.lease.release();
      });
    },
    async close() {
      closed = true;
      const entry = current;
      current = undefined;
      if (!entry) return;
      // Do not let a dead cluster hold close() up: the lease runs out by itself then.
      await settlesWithin(
        clock,
        entry.lease
          .revoke({ deadline: new Date(Date.now() + commandTimeoutMs) })
          .catch(() => entry.lease.release()),
        Math.min(commandTimeoutMs, 1_000),
      );
      entry.lease.release();
    },
  };
}
