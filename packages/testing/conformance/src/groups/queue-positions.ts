import type { Lease, LockService, WaitersScope } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName, withContext } from '../support.js';
import { pendingAfter, until } from '../wait.js';

/** A wait on `service` whose `lock.queued` positions are kept, and its controller. */
function queuedWait(service: LockService, name: string, owner: string) {
  const positions: number[] = [];
  const controller = new AbortController();
  const granted = service.acquire({
    name,
    owner,
    ttlMs: 10_000,
    waitMs: 30_000,
    signal: controller.signal,
    onQueued: (position) => positions.push(position),
  });
  return { positions, controller, granted };
}

/** Until `wait` was told `position` last. */
function untilAt(wait: { positions: number[] }, position: number, what: string) {
  return until(() => wait.positions.at(-1) === position, { what: `${what} at ${position}` });
}

/** Where `ctx`'s backend counts waiters: in its own queue when it keeps and counts one. */
function scopeOf(ctx: ConformanceContext): WaitersScope {
  return ctx.caps.fairQueue && ctx.backend.queue?.count ? 'backend' : 'server';
}

/** `lock.get`'s `waiters` and `waitersScope` on `service` are `waiters` and `scope`. */
async function expectCount(service: LockService, name: string, waiters: number, scope: string) {
  expect(await service.countWaiters(name)).toEqual({ waiters, waitersScope: scope });
}

/**
 * Who am I waiting behind (`lock.get` `waiters`, `lock.queued`): a waiting acquire is told its
 * 1-based place among the name's waiters when it starts waiting and whenever a waiter ahead
 * leaves (granted or given up); the count follows. Where the backend keeps a queue shared by
 * every dlm server and counts it (`fairQueue` with `BackendQueue.count`), the waiters and places
 * are the backend's, across servers (`waitersScope: "backend"`); otherwise each server's own
 * (`"server"`): a waiter on another server is not counted. A lock that was free is granted
 * without any position told.
 */
export function queuePositionsGroup(ctx: ConformanceContext): void {
  describe('queue positions (lock.queued, waiters)', () => {
    it(
      'each waiter is told its place when it starts waiting, and moves up as those ahead leave',
      withContext(ctx, async (ctx) => {
        const { service } = ctx;
        const name = lockName('positions');
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 10_000 });
        const first = queuedWait(service, name, 'w1');
        await untilAt(first, 1, 'w1');
        const second = queuedWait(service, name, 'w2');
        await untilAt(second, 2, 'w2');
        const third = queuedWait(service, name, 'w3');
        await untilAt(third, 3, 'w3');
        expect(service.waiters(name)).toBe(3);
        await expectCount(service, name, 3, scopeOf(ctx));
        // The first gives up: the two behind move up, each told once.
        first.controller.abort();
        expect((await failure(first.granted)).code).toBe('CANCELLED');
        await untilAt(second, 1, 'w2');
        await untilAt(third, 2, 'w3');
        expect(service.waiters(name)).toBe(2);
        await expectCount(service, name, 2, scopeOf(ctx));
        // The holder releases: the second is granted, the third is first in line.
        await service.release({ name, token: holder.token });
        const lease: Lease = await second.granted;
        await untilAt(third, 1, 'w3');
        expect(await pendingAfter(third.granted, 50)).toBe(true);
        await service.release({ name, token: lease.token });
        const last = await third.granted;
        await service.release({ name, token: last.token });
        expect(first.positions).toEqual([1]);
        expect(second.positions).toEqual([2, 1]);
        expect(third.positions).toEqual([3, 2, 1]);
        expect(service.waiters(name)).toBe(0);
        await expectCount(service, name, 0, scopeOf(ctx));
      }),
    );

    it(
      "with the backend's queue, each server counts and places the other's waiters too",
      withContext(ctx, async (ctx, test) => {
        // Capability gate: a queue shared by every server, that the backend counts.
        if (scopeOf(ctx) !== 'backend') test.skip('no fairQueue with BackendQueue.count');
        const other = await ctx.otherService();
        const name = lockName('positions-backend');
        const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 10_000 });
        const here = queuedWait(ctx.service, name, 'here');
        await untilAt(here, 1, 'here');
        const there = queuedWait(other, name, 'there');
        await untilAt(there, 2, 'there');
        const later = queuedWait(ctx.service, name, 'later');
        await untilAt(later, 3, 'later');
        // Each server's own count stays its own; lock.get's is the backend's.
        expect([ctx.service.waiters(name), other.waiters(name)]).toEqual([2, 1]);
        await expectCount(ctx.service, name, 3, 'backend');
        await expectCount(other, name, 3, 'backend');
        // The first gives up on this server: the other server's waiter moves up (told by the
        // backend's notification of the departure), and so does the one behind it here.
        here.controller.abort();
        expect((await failure(here.granted)).code).toBe('CANCELLED');
        await untilAt(there, 1, 'there');
        await untilAt(later, 2, 'later');
        await expectCount(other, name, 2, 'backend');
        // The holder releases: the other server's waiter is granted, this one's is first.
        await ctx.service.release({ name, token: holder.token });
        const lease = await there.granted;
        await untilAt(later, 1, 'later');
        await expectCount(ctx.service, name, 1, 'backend');
        await other.release({ name, token: lease.token });
        await ctx.service.release({ name, token: (await later.granted).token });
        expect(here.positions).toEqual([1]);
        expect(there.positions).toEqual([2, 1]);
        expect(later.positions).toEqual([3, 2, 1]);
        await expectCount(other, name, 0, 'backend');
      }),
    );

    it(
      "a wait on another server is that server's: each counts and tells its own waiters",
      withContext(ctx, async (ctx, test) => {
        if (scopeOf(ctx) !== 'server') test.skip("the backend counts every server's waiters");
        const other = await ctx.otherService();
        const name = lockName('positions-servers');
        const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 10_000 });
        const here = queuedWait(ctx.service, name, 'here');
        await untilAt(here, 1, 'here');
        const there = queuedWait(other, name, 'there');
        await untilAt(there, 1, 'there');
        expect(ctx.service.waiters(name)).toBe(1);
        expect(other.waiters(name)).toBe(1);
        here.controller.abort();
        there.controller.abort();
        await Promise.allSettled([here.granted, there.granted]);
        await ctx.service.release({ name, token: holder.token });
        expect(here.positions).toEqual([1]);
        expect(there.positions).toEqual([1]);
        await expectCount(other, name, 0, 'server');
      }),
    );

    it(
      'a lock that is free is granted without a position, and a try-lock is never told one',
      withContext(ctx, async (ctx) => {
        const name = lockName('positions-free');
        const told: number[] = [];
        const lease = await ctx.service.acquire({
          name,
          owner: 'a',
          ttlMs: 10_000,
          waitMs: 5_000,
          onQueued: (position) => told.push(position),
        });
        const refused = ctx.service.acquire({
          name,
          owner: 'b',
          ttlMs: 10_000,
          onQueued: (position) => told.push(position),
        });
        expect((await failure(refused)).code).toBe('LOCK_HELD');
        await ctx.service.release({ name, token: lease.token });
        expect(told).toEqual([]);
        expect(ctx.service.waiters(name)).toBe(0);
        await expectCount(ctx.service, name, 0, scopeOf(ctx));
      }),
    );
  });
}
