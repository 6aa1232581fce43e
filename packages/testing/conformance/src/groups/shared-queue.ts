import { createLeaseKey, type Lease, type LockService, type LostEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { servicesFor, sharedModesTest, untilQueued } from '../shared-support.js';
import { expirySlack, failure, lockName, type Skippable, shortTtl } from '../support.js';
import { pendingAfter, until } from '../wait.js';

/** How long a waiter must stay unanswered to count as waiting (it would be granted sooner). */
const STILL_WAITING_MS = 300;

/**
 * One FIFO queue per name for both modes, and a semaphore at its limit letting the next waiter
 * in on a release or an expiry: for backends with `capabilities.sharedModes`.
 */
export function sharedQueueGroup(ctx: ConformanceContext): void {
  describe('shared modes: one queue for both modes', () => {
    it(
      'S, S, X, S queued on one server: both S together, X after both release, the last S after X',
      sharedModesTest(ctx, fifoOnOneServer),
    );
    it(
      'with a fair queue, S, S, X, S queued across servers are served in that order',
      sharedModesTest(ctx, fifoAcrossServers),
    );
    it(
      'a semaphore at its limit admits the next waiter promptly when a holder releases (waiter on another server)',
      sharedModesTest(ctx, semaphoreAdmitsOnRelease),
    );
    it(
      "a semaphore at its limit admits the next waiter at a holder's expiry, within its lease plus a small bound",
      sharedModesTest(ctx, semaphoreAdmitsOnExpiry),
    );
    it(
      'waiters at a full semaphore are admitted one per release, in queue order (across servers with a fair queue)',
      sharedModesTest(ctx, semaphoreInQueueOrder),
    );
    it(
      "a waiting writer is granted at the last reader's end, which a shorter refresh moved closer",
      sharedModesTest(ctx, writerAtLastReadersEnd),
    );
    it(
      'a shared wait behind one with another limit waits for it, then is refused naming limit (theirs)',
      sharedModesTest(ctx, otherLimitBehind),
    );
    it(
      'a wait answers a conflict at once and leaves nothing queued; a shared waiter that gives up leaves too',
      sharedModesTest(ctx, waitsLeaveTheQueue),
    );
  });
}

/**
 * S, S, X, S queued in that order behind an exclusive holder, over `services` (each request on
 * the next one): both S granted together, X once both released, the last S only after X.
 */
async function fifoAcrossModes(
  ctx: ConformanceContext,
  services: readonly LockService[],
): Promise<void> {
  const name = lockName('fifo-modes');
  const on = (i: number) => services[i % services.length]!;
  const first = await on(0).acquire({ name, owner: 'first', ttlMs: 30_000 });
  const asks: Array<['shared' | 'exclusive', string]> = [
    ['shared', 'r1'],
    ['shared', 'r2'],
    ['exclusive', 'w'],
    ['shared', 'r3'],
  ];
  const waits: Promise<Lease>[] = [];
  for (const [i, [mode, owner]] of asks.entries()) {
    waits.push(on(i + 1).acquire({ name, owner, ttlMs: 30_000, waitMs: 20_000, mode }));
    await untilQueued(ctx, services, name, i + 1);
  }
  const [r1, r2, w, r3] = waits as [Promise<Lease>, Promise<Lease>, Promise<Lease>, Promise<Lease>];
  await on(0).release({ name, token: first.token });
  const [read1, read2] = await Promise.all([r1, r2]);
  // Both readers hold at once; the writer is next, so the last reader waits though it fits.
  expect((await ctx.service.get(name))?.holders?.map((h) => h.owner).sort()).toEqual(['r1', 'r2']);
  expect(await pendingAfter(w, STILL_WAITING_MS)).toBe(true);
  expect(await pendingAfter(r3, 0)).toBe(true);
  await on(1).release({ name, token: read1.token });
  expect(await pendingAfter(w, STILL_WAITING_MS)).toBe(true);
  await on(2).release({ name, token: read2.token });
  const write = await w;
  expect(await pendingAfter(r3, STILL_WAITING_MS)).toBe(true);
  await on(3).release({ name, token: write.token });
  const read3 = await r3;
  expect(write.token).toBeGreaterThan(read1.token);
  expect(write.token).toBeGreaterThan(read2.token);
  expect(read3.token).toBeGreaterThan(write.token);
  await on(4).release({ name, token: read3.token });
}

async function fifoOnOneServer(ctx: ConformanceContext): Promise<void> {
  await fifoAcrossModes(ctx, [ctx.service]);
}

async function fifoAcrossServers(ctx: ConformanceContext, test: Skippable): Promise<void> {
  // Capability gate: arrival order across servers needs the backend's own queue.
  if (!ctx.caps.fairQueue) test.skip('the backend has no fair queue (capabilities.fairQueue)');
  await fifoAcrossModes(ctx, await servicesFor(ctx, 3));
}

async function semaphoreAdmitsOnRelease(ctx: ConformanceContext): Promise<void> {
  const name = lockName('sem-release');
  const permit = { mode: 'shared', limit: 2 } as const;
  const a = await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, ...permit });
  await ctx.service.acquire({ name, owner: 'b', ttlMs: 30_000, ...permit });
  const other = await ctx.otherService();
  const c = other.acquire({ name, owner: 'c', ttlMs: 30_000, waitMs: 20_000, ...permit });
  expect(await pendingAfter(c, STILL_WAITING_MS)).toBe(true);
  const releasedAt = performance.now();
  await ctx.service.release({ name, token: a.token });
  const lease = await c;
  expect(performance.now() - releasedAt).toBeLessThan(1_500);
  expect(lease.token).toBeGreaterThan(a.token);
  expect([lease.mode, lease.limit]).toEqual(['shared', 2]);
  const state = await ctx.service.get(name);
  expect(state?.holders?.map((h) => h.owner)).toEqual(['b', 'c']);
  expect(state?.limit).toBe(2);
}

async function semaphoreAdmitsOnExpiry(ctx: ConformanceContext): Promise<void> {
  const name = lockName('sem-expiry');
  const ttl = shortTtl(ctx.caps);
  const permit = { mode: 'shared', limit: 2 } as const;
  const lost: LostEvent[] = [];
  await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, ...permit });
  const grantedAt = performance.now();
  const b = await ctx.service.acquire({
    name,
    owner: 'b',
    ttlMs: ttl,
    onLost: (event) => lost.push(event),
    ...permit,
  });
  // No polling here: the wait itself must be woken by the expiry (event or lease timer).
  const c = await ctx.service.acquire({
    name,
    owner: 'c',
    ttlMs: 30_000,
    waitMs: ttl + 10_000,
    ...permit,
  });
  const waitedMs = performance.now() - grantedAt;
  expect(waitedMs).toBeGreaterThanOrEqual(ttl - 50);
  expect(waitedMs).toBeLessThan(ttl + expirySlack(ctx.caps) + 1_000);
  expect(c.token).toBeGreaterThan(b.token);
  expect((await ctx.service.get(name))?.holders?.map((h) => h.owner)).toEqual(['a', 'c']);
  // Its holder is told, whether by the backend's expiry event or core's own check.
  await until(() => lost.length > 0, { what: "b's lock.lost" });
  expect(lost).toEqual([{ name, token: b.token, reason: 'expired' }]);
}

async function semaphoreInQueueOrder(ctx: ConformanceContext): Promise<void> {
  const name = lockName('sem-order');
  const services = await servicesFor(ctx, 2);
  const on = (i: number) => services[i % services.length]!;
  const permit = { mode: 'shared', limit: 1 } as const;
  let held = await on(0).acquire({ name, owner: 'p0', ttlMs: 30_000, ...permit });
  const waits: Array<[string, Promise<Lease>]> = [];
  for (const [i, owner] of ['w1', 'w2', 'w3'].entries()) {
    // Queued one after the other, so that their order is known.
    waits.push([
      owner,
      on(i + 1).acquire({ name, owner, ttlMs: 30_000, waitMs: 20_000, ...permit }),
    ]);
    await untilQueued(ctx, services, name, i + 1);
  }
  for (const [i, [owner, wait]] of waits.entries()) {
    expect(await pendingAfter(wait, 100)).toBe(true);
    const releasedAt = performance.now();
    await on(i).release({ name, token: held.token });
    const next = await wait;
    expect(next.owner).toBe(owner);
    expect(next.token).toBeGreaterThan(held.token);
    expect(performance.now() - releasedAt).toBeLessThan(2_000);
    held = next;
  }
}

async function writerAtLastReadersEnd(ctx: ConformanceContext): Promise<void> {
  const name = lockName('writer-at-end');
  const services = await servicesFor(ctx, 2);
  const [readers, writers] = [services[0]!, services.at(-1)!];
  const end = shortTtl(ctx.caps) * 2;
  const permit = { mode: 'shared', limit: 4 } as const;
  const key = createLeaseKey();
  const r1 = await readers.acquire({ name, owner: 'r1', ttlMs: 30_000, leaseKey: key, ...permit });
  // r1 refreshes to a short lease: the readers' last end is now its new end, not the old one.
  const again = await readers.acquire({
    name,
    owner: 'r1',
    ttlMs: shortTtl(ctx.caps),
    leaseKey: key,
    ...permit,
  });
  expect(again.token).toBe(r1.token);
  const r2 = await readers.acquire({ name, owner: 'r2', ttlMs: end, ...permit });
  const startedAt = performance.now();
  const w = await writers.acquire({ name, owner: 'w', ttlMs: 30_000, waitMs: 30_000 });
  const waitedMs = performance.now() - startedAt;
  // Not before the longer reader's lease ran out, and soon after it (nothing polls).
  expect(waitedMs).toBeGreaterThanOrEqual(end - 100);
  expect(waitedMs).toBeLessThan(end + expirySlack(ctx.caps) + 1_000);
  expect(w.token).toBeGreaterThan(r2.token);
  expect(await readers.get(name)).toMatchObject({ owner: 'w', token: w.token, mode: 'exclusive' });
}

async function otherLimitBehind(ctx: ConformanceContext): Promise<void> {
  const name = lockName('other-limit-behind');
  const services = await servicesFor(ctx, 2);
  const on = (i: number) => services[i % services.length]!;
  const holder = await on(0).acquire({ name, owner: 'h', ttlMs: 30_000 });
  const two = on(0).acquire({
    name,
    owner: 'two',
    ttlMs: 30_000,
    waitMs: 20_000,
    mode: 'shared',
    limit: 2,
  });
  await untilQueued(ctx, services, name, 1);
  const three = failure(
    on(1).acquire({
      name,
      owner: 'three',
      ttlMs: 30_000,
      waitMs: 20_000,
      mode: 'shared',
      limit: 3,
    }),
  );
  await untilQueued(ctx, services, name, 2);
  await on(0).release({ name, token: holder.token });
  const granted = await two;
  expect((await three).details).toMatchObject({ field: 'limit', limit: 2 });
  const state = await on(0).get(name);
  expect(state?.holders?.map((h) => h.token)).toEqual([granted.token]);
  expect(state?.limit).toBe(2);
}

async function waitsLeaveTheQueue(ctx: ConformanceContext): Promise<void> {
  const name = lockName('wait-conflicts');
  const key = createLeaseKey();
  const permit = { mode: 'shared', limit: 2 } as const;
  await ctx.service.acquire({ name, owner: 'r', ttlMs: 30_000, leaseKey: key, ...permit });
  await ctx.service.acquire({ name, owner: 'r2', ttlMs: 30_000, ...permit });
  // Through another server, which does not know it holds: the backend answers.
  const other = await ctx.otherService();
  const wait = { ttlMs: 30_000, waitMs: 20_000 };
  const startedAt = performance.now();
  const limit = await failure(
    other.acquire({ name, owner: 'x', ...wait, mode: 'shared', limit: 3 }),
  );
  expect(limit.details).toMatchObject({ field: 'limit', limit: 2 });
  const mode = await failure(other.acquire({ name, owner: 'r', leaseKey: key, ...wait }));
  expect(mode.details.field).toBe('mode');
  expect(performance.now() - startedAt).toBeLessThan(3_000);
  // A shared waiter at the full semaphore, and one that gives up behind it.
  const controller = new AbortController();
  const quitter = failure(
    other.acquire({ name, owner: 'q', ...wait, ...permit, signal: controller.signal }),
  );
  await untilQueued(ctx, [other], name, 1);
  // With a waiter queued, a request with another limit is answered too.
  const queuedConflict = await failure(
    ctx.service.acquire({ name, owner: 'y', ...wait, mode: 'shared', limit: 7 }),
  );
  expect(queuedConflict.details).toMatchObject({ field: 'limit', limit: 2 });
  controller.abort();
  expect((await quitter).code).toBe('CANCELLED');
  expect(other.waiters(name) + ctx.service.waiters(name)).toBe(0);
  const probe = ctx.target.fairQueue;
  if (probe)
    await until(async () => (await probe.entries(name)).length === 0, { what: 'an empty queue' });
}
