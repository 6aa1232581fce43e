import { createLeaseKey, type LockService } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName, type Skippable, withContext } from '../support.js';
import { sleep, until } from '../wait.js';

/**
 * Two-server group: the cross-server fair queue, for every backend that declares
 * `capabilities.fairQueue` (it orders waiters in the store, so that waiters on different dlm
 * servers are granted in the order they queued). The second server is `target.openSecond`.
 */
export function fairQueueGroup(ctx: ConformanceContext): void {
  describe('fair queue across servers', () => {
    it(
      'with a fair queue, waiters on different service instances are granted in arrival order',
      withContext(ctx, arrivalOrderAcrossServices),
    );
    it(
      'waiters on two servers are granted in the order they queued, and leave nothing in the queue',
      withContext(ctx, queueOrderAcrossServers),
    );
    it(
      "the holder's own owner, waiting through another server behind queued waiters, gets its lease back at once",
      withContext(ctx, holderAgainThroughAnotherServer),
    );
    it(
      'an aborted wait (CANCELLED) and one at its deadline (LOCK_HELD with the lease left) leave the queue',
      withContext(ctx, abortedWaitLeavesTheQueue),
    );
  });
}

/** A wait through `service`, long enough never to run out in a test. */
function queued(service: LockService, name: string, owner: string, signal?: AbortSignal) {
  return service.acquire({
    name,
    owner,
    ttlMs: 5_000,
    waitMs: 30_000,
    ...(signal ? { signal } : {}),
  });
}

/** Until `count` waiters are in `name`'s queue (without a probe: a pause long enough for one). */
async function untilInQueue(ctx: ConformanceContext, name: string, count: number): Promise<void> {
  const probe = ctx.target.fairQueue;
  if (!probe) return sleep(150);
  await until(async () => (await probe.entries(name)).length >= count, {
    what: `${count} waiters in ${name}`,
  });
}

/** The queue holds nothing for `name` any more (checked where the target gives a probe). */
async function expectQueueEmpty(ctx: ConformanceContext, name: string): Promise<void> {
  if (ctx.target.fairQueue) {
    // Leaving is the last thing a wait does, after its caller heard how it ended.
    await until(async () => (await ctx.target.fairQueue!.entries(name)).length === 0, {
      what: `${name}'s queue empty`,
    });
  }
}

/** Two dlm servers of one deployment over a backend with a fair queue (skipped otherwise). */
async function twoServers(ctx: ConformanceContext, test: Skippable) {
  // Capability gate: the cross-server queue lives in the backend; without one, each server's
  // core queues its own waiters (covered by the waiting group on every backend).
  if (!ctx.caps.fairQueue) test.skip('the backend has no fair queue (capabilities.fairQueue)');
  return [ctx.service, await ctx.otherService()] as const;
}

async function arrivalOrderAcrossServices(ctx: ConformanceContext, test: Skippable): Promise<void> {
  // Capability gate: arrival order across servers needs the backend's own queue.
  if (!ctx.caps.fairQueue) test.skip('the backend has no fair queue (capabilities.fairQueue)');
  const name = lockName('fair-across');
  const services = [ctx.service];
  for (let i = 0; i < 2; i += 1) {
    const other = await ctx.otherService();
    services.push(other);
  }
  const holder = await ctx.service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const order: string[] = [];
  const waiters: Promise<void>[] = [];
  for (let i = 0; i < 6; i += 1) {
    const svc = services[i % services.length]!;
    waiters.push(
      svc.acquire({ name, owner: `w${i}`, ttlMs: 10_000, waitMs: 30_000 }).then(async (lease) => {
        order.push(lease.owner);
        await sleep(10);
        await svc.release({ name, token: lease.token });
      }),
    );
    // Let each waiter take its place in the backend's queue before the next arrives.
    await sleep(150);
  }
  await ctx.service.release({ name, token: holder.token });
  await Promise.all(waiters);
  expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
}

async function queueOrderAcrossServers(ctx: ConformanceContext, test: Skippable): Promise<void> {
  const [a, b] = await twoServers(ctx, test);
  const name = lockName('fq-order');
  const holder = await a.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const order: string[] = [];
  const waits: Promise<void>[] = [];
  for (let i = 0; i < 4; i += 1) {
    const service = i % 2 ? b : a;
    waits.push(
      queued(service, name, `w${i}`).then(async (lease) => {
        order.push(lease.owner);
        await service.release({ name, token: lease.token });
      }),
    );
    await untilInQueue(ctx, name, i + 1);
  }
  await a.release({ name, token: holder.token });
  await Promise.all(waits);
  expect(order).toEqual(['w0', 'w1', 'w2', 'w3']);
  await expectQueueEmpty(ctx, name);
}

async function holderAgainThroughAnotherServer(
  ctx: ConformanceContext,
  test: Skippable,
): Promise<void> {
  const [a, b] = await twoServers(ctx, test);
  const name = lockName('fq-own-again');
  const leaseKey = createLeaseKey();
  const holder = await a.acquire({ name, owner: 'holder', ttlMs: 30_000, leaseKey });
  const other = queued(a, name, 'other');
  await untilInQueue(ctx, name, 1);
  // As when a grant's reply was lost with its dlm server and the client re-sends the acquire
  // (same owner and key) through another one.
  const again = await b.acquire({ name, owner: 'holder', ttlMs: 5_000, waitMs: 30_000, leaseKey });
  expect(again.token).toBe(holder.token);
  await b.release({ name, token: holder.token, leaseKey });
  expect((await other).owner).toBe('other');
}

async function abortedWaitLeavesTheQueue(ctx: ConformanceContext, test: Skippable): Promise<void> {
  const [service] = await twoServers(ctx, test);
  const name = lockName('fq-abort');
  await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
  const controller = new AbortController();
  const aborted = failure(queued(service, name, 'quitter', controller.signal));
  await untilInQueue(ctx, name, 1);
  controller.abort();
  expect((await aborted).code).toBe('CANCELLED');
  await expectQueueEmpty(ctx, name);
  // At its deadline a wait answers LOCK_HELD with the holder's lease left, and leaves too.
  const timedOut = await failure(
    service.acquire({ name, owner: 'late', ttlMs: 5_000, waitMs: 400 }),
  );
  expect(timedOut.code).toBe('LOCK_HELD');
  expect(timedOut.details.ttlRemainingMs).toBeGreaterThan(0);
  await expectQueueEmpty(ctx, name);
}
