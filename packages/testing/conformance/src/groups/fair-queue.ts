import type { AcquireResult, LockBackend } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { granted } from '../grants.js';
import { lockName, type Skippable, withContext } from '../support.js';
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
      'an aborted wait leaves the queue and answers granted: false with the remaining lease',
      withContext(ctx, abortedWaitLeavesTheQueue),
    );
  });
}

function queued(backend: LockBackend, name: string, owner: string, signal: AbortSignal) {
  return backend.acquireQueued!({ name, owner, ttlMs: 5_000, signal });
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
  if (ctx.target.fairQueue) expect(await ctx.target.fairQueue.entries(name)).toEqual([]);
}

/** This test's backend, when it has a fair queue (the test is skipped otherwise). */
function fairQueueBackend(ctx: ConformanceContext, test: Skippable): LockBackend {
  // Capability gate: the cross-server queue lives in the backend; without one, each server's
  // core queues its own waiters (covered by the waiting group on every backend).
  if (!ctx.caps.fairQueue || !ctx.backend.acquireQueued)
    test.skip('the backend has no fair queue (capabilities.fairQueue, acquireQueued)');
  return ctx.backend;
}

/** Two backends on one store: two dlm servers of one deployment. */
async function twoServers(ctx: ConformanceContext, test: Skippable) {
  return [fairQueueBackend(ctx, test), await ctx.secondBackend()] as const;
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
  const holder = await granted(a, name, 'holder');
  const order: string[] = [];
  const waits: Promise<void>[] = [];
  for (let i = 0; i < 4; i += 1) {
    const backend = i % 2 ? b : a;
    waits.push(
      queued(backend, name, `w${i}`, new AbortController().signal).then(async (result) => {
        if (!result.granted) throw new Error('expected a grant');
        order.push(result.grant.owner);
        await backend.release({ name, token: result.grant.token });
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
  const holder = await granted(a, name, 'holder');
  const other = queued(a, name, 'other', new AbortController().signal);
  await untilInQueue(ctx, name, 1);
  // As when a grant's reply was lost with its dlm server and the client re-sends the acquire
  // (same owner) through another one.
  const again = await queued(b, name, 'holder', new AbortController().signal);
  expect(again.granted && again.grant.token).toBe(holder.token);
  expect(await b.release({ name, token: holder.token })).toBe(true);
  const next = await other;
  expect(next.granted && next.grant.owner).toBe('other');
}

async function abortedWaitLeavesTheQueue(ctx: ConformanceContext, test: Skippable): Promise<void> {
  const backend = fairQueueBackend(ctx, test);
  const name = lockName('fq-abort');
  await granted(backend, name, 'holder');
  const controller = new AbortController();
  const waiting = queued(backend, name, 'quitter', controller.signal);
  await untilInQueue(ctx, name, 1);
  controller.abort();
  const result: AcquireResult = await waiting;
  expect(result.granted).toBe(false);
  if (!result.granted) expect(result.ttlRemainingMs).toBeGreaterThan(0);
  await expectQueueEmpty(ctx, name);
}
