import type { LockService } from '@dlm/core';
import type { ConformanceContext } from './context.js';
import { type Skippable, type TestBody, withContext } from './support.js';
import { sleep, until } from './wait.js';

/**
 * Capability gate of the shared-mode groups: without `capabilities.sharedModes` core refuses
 * shared requests (the bad-input group checks that it does), so there is nothing to test.
 */
export function requireSharedModes(ctx: ConformanceContext, test: Skippable): void {
  if (!ctx.caps.sharedModes) test.skip('the backend does not declare capabilities.sharedModes');
}

/** `withContext` behind the `requireSharedModes` gate: `it(name, sharedModesTest(ctx, body))`. */
export function sharedModesTest(
  ctx: ConformanceContext,
  body: TestBody,
): (test: Skippable) => Promise<void> {
  return withContext(ctx, async (ctx, test) => {
    requireSharedModes(ctx, test);
    await body(ctx, test);
  });
}

/**
 * This test's service and `count - 1` more servers of the deployment where the backend orders
 * waiters itself (`fairQueue`); else this test's service alone. Without a backend queue, FIFO
 * (and so the no-starvation rule) holds per server only: one server's waiters can lose every
 * race to the server that released, which is a documented limit, not a failure.
 */
export async function servicesFor(ctx: ConformanceContext, count: number): Promise<LockService[]> {
  const servers = ctx.caps.fairQueue ? count : 1;
  const others = await Promise.all(Array.from({ length: servers - 1 }, () => ctx.otherService()));
  return [ctx.service, ...others];
}

/**
 * Until `count` waiters wait for `name` over `services`, and, for waits in the backend's own
 * queue, until they have taken their places there (the target's probe, or a pause long enough
 * for one round trip): the order waiters queue in is the order a test then expects.
 */
export async function untilQueued(
  ctx: ConformanceContext,
  services: readonly LockService[],
  name: string,
  count: number,
): Promise<void> {
  const waiting = () => services.reduce((sum, service) => sum + service.waiters(name), 0);
  await until(() => waiting() >= count, { what: `${count} waiters for ${name}` });
  if (!ctx.caps.fairQueue) return;
  const probe = ctx.target.fairQueue;
  if (!probe) return sleep(150);
  await until(async () => (await probe.entries(name)).length >= count, {
    what: `${count} entries in ${name}'s queue`,
  });
}
