import { randomBytes } from 'node:crypto';
import { type AcquireRequest, decideGrant, type LockConflict, MAX_TIMER_MS } from '@dlm/core';
import type { LockStore } from './zk-locks.js';
import { aheadOfWaiters, endOf, liveHolders, specOfRequest } from './zk-modes.js';
import type { Budget } from './zk-session.js';

export type Contention =
  /** `ttlMs`: a refresh of a lease with a cap on holding, clamped to it. */
  | { kind: 'granted'; token: bigint; path: string; ttlMs?: number }
  | { kind: 'held'; ttlRemainingMs: number }
  /** Free, but in its lock-delay for this long yet (core's rule 5). */
  | { kind: 'delayed'; lockDelayRemainingMs: number }
  /** The request can never be granted as asked while these holders hold (core's rule). */
  | { kind: 'conflict'; conflict: LockConflict }
  /** There is room, but waiters queue for it: a try-lock does not jump their queue. */
  | { kind: 'queued' };

export type Contend = (limit: Budget, request: AcquireRequest) => Promise<Contention>;

/**
 * One try at a lock, by core's grant rule with every queued waiter ahead of it (a try-lock is
 * granted exactly when a request queued now would be at once): take it, or refresh it when
 * `owner` already holds it in that mode (same token); end holders whose lease has run out on
 * ZooKeeper's clock and look again; else say who holds it.
 *
 * Uncontended, that is one read of the name node (its version, and no children) and one
 * multi-op; held, one `getChildren` and one read per holder (in parallel) more.
 */
export function contender(store: LockStore): Contend {
  return async (limit, request) => {
    const { name, owner, ttlMs, keyHash } = request;
    const spec = specOfRequest(request);
    for (;;) {
      await store.ensureParent(limit, name);
      // The name node first: its version guards the grant below against anything granted
      // (or ended) after this read.
      const node = await store.nameNode(limit, name);
      if (!node) {
        store.forgetParent(name);
        continue;
      }
      // The name's lock-delay, as the name node read here records it: the grant below is at
      // this node's version, so no end can have started another delay in between.
      const lockDelayRemainingMs = await store.delayLeft(limit, node);
      if (node.numChildren > 0) {
        const { children, holders } = await store.allHolders(limit, name);
        if (!children) continue;
        const left = holders.length ? await store.leasesLeft(limit, holders) : [];
        const expired = left.filter((entry) => entry.expired);
        if (expired.length) {
          // Expired on ZooKeeper's clock: take them over (versioned deletes, so an extension
          // in between wins), then look again.
          for (const { holder } of expired) await store.endLease(limit, name, holder, 'expired');
          continue;
        }
        const live = liveHolders(left, request);
        const decision = decideGrant(
          spec,
          Object.assign({}, live.holders, { lockDelayRemainingMs }),
          aheadOfWaiters(spec, children.waiters),
        );
        if (decision.kind === 'refresh') {
          const holder = live.own!;
          const refreshed = await store.refresh(limit, name, holder, ttlMs);
          if (!refreshed) continue;
          if (!refreshed.expired) {
            const { token, path } = holder;
            return { kind: 'granted', token, path, ttlMs: refreshed.ttlMs };
          }
          // Its lease had run out before we refreshed it: that lease is over, grant anew.
          await store.endLease(
            limit,
            name,
            Object.assign({}, holder, { version: refreshed.version }),
            'expired',
          );
          continue;
        }
        if (decision.kind === 'conflict') return decision;
        if (decision.kind === 'wait' && decision.on === 'holder') {
          const ttlRemainingMs = endOf(left, decision.end);
          return {
            kind: 'held',
            ttlRemainingMs: Math.min(Math.max(1, ttlRemainingMs), MAX_TIMER_MS),
          };
        }
        if (decision.kind === 'wait' && decision.on === 'delay') {
          return {
            kind: 'delayed',
            lockDelayRemainingMs: Math.min(lockDelayRemainingMs, MAX_TIMER_MS),
          };
        }
        // Waiters come first: a try-lock does not jump their queue.
        if (decision.kind === 'wait') return { kind: 'queued' };
        // Granted at the name node's version read first, which the children must have been
        // listed at (else something moved: look again).
        if (children.version !== node.version) continue;
      } else if (lockDelayRemainingMs > 0) {
        return {
          kind: 'delayed',
          lockDelayRemainingMs: Math.min(lockDelayRemainingMs, MAX_TIMER_MS),
        };
      }
      const attemptId = randomBytes(8).toString('hex');
      const created = await store.createHolder(
        limit,
        name,
        node,
        owner,
        keyHash,
        ttlMs,
        attemptId,
        undefined,
        spec,
        request.lockDelayMs ?? 0,
      );
      if (created.kind === 'created') {
        return { kind: 'granted', token: created.token, path: created.path };
      }
    }
  };
}
