import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, failure, lockName, shortTtl, withContext } from '../support.js';
import { sleep } from '../wait.js';

/**
 * Waiting: deadlines, event-driven wake-ups (also from another instance), FIFO per instance,
 * abort and shutdown end waits with CANCELLED, no barging.
 */
export function waitingGroup(ctx: ConformanceContext): void {
  describe('waiting', () => {
    it('a wait ends at its deadline with LOCK_HELD', withContext(ctx, endsAtDeadline));
    it(
      'a waiter is woken promptly on release (event-driven, not at the lease end)',
      withContext(ctx, wokenOnRelease),
    );
    it(
      'a waiter on another service instance is woken by the release notification',
      withContext(ctx, wokenFromAnotherInstance),
    );
    it('waiters are granted in FIFO order', withContext(ctx, grantedInFifoOrder));
    it(
      'a waiter whose holder expires is granted after the lease ends',
      withContext(ctx, grantedAtHolderExpiry),
    );
    it(
      'an aborted wait ends with CANCELLED and is never granted later',
      withContext(ctx, abortedWaitIsCancelled),
    );
    it('a try-lock does not jump the queue of waiters', withContext(ctx, tryLockDoesNotBarge));
    it('closing the service ends waits with CANCELLED', withContext(ctx, closeCancelsWaits));
  });
}

async function endsAtDeadline(ctx: ConformanceContext): Promise<void> {
  const name = lockName('deadline');
  await ctx.service.acquire({ name, owner: 'holder', ttlMs: 20_000 });
  const started = performance.now();
  const error = await failure(
    ctx.service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 400 }),
  );
  const elapsed = performance.now() - started;
  expect(error.code).toBe('LOCK_HELD');
  expect(elapsed).toBeGreaterThanOrEqual(380);
  expect(elapsed).toBeLessThan(2_500);
}

async function wokenOnRelease(ctx: ConformanceContext): Promise<void> {
  const name = lockName('wake');
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const waiting = ctx.service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
  await sleep(150);
  const releasedAt = performance.now();
  await ctx.service.release({ name, token: holder.token });
  const granted = await waiting;
  const wakeMs = performance.now() - releasedAt;
  expect(granted.owner).toBe('waiter');
  expect(granted.token).toBeGreaterThan(holder.token);
  expect(wakeMs).toBeLessThan(1_000);
}

async function wokenFromAnotherInstance(ctx: ConformanceContext): Promise<void> {
  const name = lockName('wake-remote');
  const other = await ctx.otherService();
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const waiting = other.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
  await sleep(200);
  const releasedAt = performance.now();
  await ctx.service.release({ name, token: holder.token });
  const granted = await waiting;
  expect(granted.owner).toBe('waiter');
  expect(performance.now() - releasedAt).toBeLessThan(1_500);
}

async function grantedInFifoOrder(ctx: ConformanceContext): Promise<void> {
  const name = lockName('fifo');
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const order: string[] = [];
  const waiters = Array.from({ length: 6 }, (_, i) =>
    ctx.service
      .acquire({ name, owner: `w${i}`, ttlMs: 10_000, waitMs: 20_000 })
      .then(async (lease) => {
        order.push(lease.owner);
        await sleep(10);
        await ctx.service.release({ name, token: lease.token });
      }),
  );
  await sleep(100);
  await ctx.service.release({ name, token: holder.token });
  await Promise.all(waiters);
  expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
}

async function grantedAtHolderExpiry(ctx: ConformanceContext): Promise<void> {
  const name = lockName('wait-expiry');
  const ttl = shortTtl(ctx.caps);
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: ttl });
  const started = performance.now();
  const lease = await ctx.service.acquire({
    name,
    owner: 'waiter',
    ttlMs: 5_000,
    waitMs: ttl + 10_000,
  });
  expect(lease.token).toBeGreaterThan(holder.token);
  expect(performance.now() - started).toBeLessThan(ttl + expirySlack(ctx.caps) + 1_000);
}

async function abortedWaitIsCancelled(ctx: ConformanceContext): Promise<void> {
  const name = lockName('abort');
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const controller = new AbortController();
  const waiting = failure(
    ctx.service.acquire({
      name,
      owner: 'quitter',
      ttlMs: 5_000,
      waitMs: 20_000,
      signal: controller.signal,
    }),
  );
  await sleep(50);
  controller.abort();
  expect((await waiting).code).toBe('CANCELLED');
  await ctx.service.release({ name, token: holder.token });
  await sleep(200);
  const next = await ctx.service.acquire({ name, owner: 'next', ttlMs: 5_000 });
  expect(next.owner).toBe('next');
  expect(ctx.service.waiters(name)).toBe(0);
}

async function tryLockDoesNotBarge(ctx: ConformanceContext): Promise<void> {
  const name = lockName('no-barging');
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const waiting = ctx.service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
  await sleep(50);
  expect((await failure(ctx.service.acquire({ name, owner: 'barger', ttlMs: 5_000 }))).code).toBe(
    'LOCK_HELD',
  );
  await ctx.service.release({ name, token: holder.token });
  expect((await waiting).owner).toBe('waiter');
}

async function closeCancelsWaits(ctx: ConformanceContext): Promise<void> {
  const name = lockName('close');
  await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const waiting = failure(
    ctx.service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 }),
  );
  await sleep(50);
  await ctx.service.close();
  expect((await waiting).code).toBe('CANCELLED');
}
