import { randomBytes } from 'node:crypto';
import type { AcquireRequest } from '@dlm/core';
import { isOwnLease, type LockStore } from './zk-locks.js';
import type { LockPaths } from './zk-paths.js';
import type { Budget } from './zk-session.js';

/** The longest delay a timer takes; a lease without a readable TTL reports this. */
const FOREVER_MS = 2 ** 31 - 1;

export type Contention =
  | { kind: 'granted'; token: bigint; path: string }
  | { kind: 'held'; ttlRemainingMs: number }
  /** Nobody holds it, but waiters queue for it: a try-lock does not jump their queue. */
  | { kind: 'queued' };

export type Contend = (limit: Budget, request: AcquireRequest) => Promise<Contention>;

/**
 * One try at a lock, shared by tryAcquire and a waiter joining the queue: take it when it is
 * free and nobody queues; refresh it when `owner` already holds it (same token); end it when
 * its lease has run out on ZooKeeper's clock and look again; else say who holds it.
 *
 * Uncontended, that is one read of the name node (its version, and no children) and one
 * multi-op.
 */
export function contender(store: LockStore, paths: LockPaths): Contend {
  return async (limit, { name, owner, ttlMs, keyHash }) => {
    for (;;) {
      await store.ensureParent(limit, name);
      // The name node first: its version guards the grant below against anything granted
      // after this read.
      const node = await store.nameNode(limit, name);
      if (!node) {
        store.forgetParent(name);
        continue;
      }
      if (node.numChildren > 0) {
        const children = await store.childrenOf(limit, name);
        const holderName = children?.holders[0];
        if (holderName) {
          const holder = await store.readHolder(limit, `${paths.parent(name)}/${holderName}`);
          if (!holder) continue;
          if (isOwnLease(holder, owner, keyHash)) {
            const refreshed = await store.refresh(limit, name, holder, ttlMs);
            if (!refreshed) continue;
            if (!refreshed.expired)
              return { kind: 'granted', token: holder.token, path: holder.path };
            // Its lease had run out before we refreshed it: that lease is over, grant anew.
            await store.endLease(limit, name, { ...holder, version: refreshed.version }, 'expired');
            continue;
          }
          const left = await store.leaseLeft(limit, holder);
          if (left.expired) {
            // Expired on ZooKeeper's clock: take it over (a versioned delete, so an extension
            // in between wins), then look again.
            await store.endLease(limit, name, holder, 'expired');
            continue;
          }
          return {
            kind: 'held',
            ttlRemainingMs: Math.min(Math.max(1, left.remainingMs), FOREVER_MS),
          };
        }
        if (children?.waiters.length) return { kind: 'queued' };
      }
      const attemptId = randomBytes(8).toString('hex');
      const created = await store.createHolder(limit, name, node, owner, keyHash, ttlMs, attemptId);
      if (created.kind === 'created') {
        return { kind: 'granted', token: created.token, path: created.path };
      }
    }
  };
}
