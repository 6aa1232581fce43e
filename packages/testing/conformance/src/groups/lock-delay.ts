import type { LockService } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, failure, lockName, type Skippable, shortTtl } from '../support.js';
import { until } from '../wait.js';

/** The lock-delay the group asks for: long beside a test's own steps, short beside its budget. */
const DELAY_MS = 2_000;

/**
 * Lock-delay (`lockDelayMs`, with `capabilities.lockDelay`): a lease that ends by expiry or
 * revocation holds its name back from everyone for its delay; a release does not. The delay lives
 * in the backend, so another server of the deployment sees it, and so does the same store after
 * a restart where the backend is durable.
 */
export function lockDelayGroup(ctx: ConformanceContext): void {
  describe('lock-delay', () => {
    /** `owner` a's lease on `name` for `ttlMs`, with the group's lock-delay. */
    const delayed = (name: string, ttlMs: number) =>
      ctx.service.acquire({ name, owner: 'a', ttlMs, lockDelayMs: DELAY_MS });
    const gate = (test: Skippable) => {
      // Capability gate: a backend that keeps no lock-delays refuses lockDelayMs (tested below).
      if (!ctx.caps.lockDelay) test.skip('no capabilities.lockDelay');
    };

    it('after an expiry nobody is granted the name within lockDelayMs, then the next token is', async (test) => {
      gate(test);
      const name = lockName('delay-expiry');
      const ttl = shortTtl(ctx.caps);
      const first = await delayed(name, ttl);
      const endedAt = performance.now() + ttl;
      await expired(ctx.service, name, ctx);
      const refused = await failure(ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 }));
      expect(refused.code).toBe('LOCK_HELD');
      expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(0);
      expect(refused.details.lockDelayRemainingMs).toBeLessThanOrEqual(DELAY_MS);
      expect(await ctx.service.get(name)).toBeNull();
      expect(await ctx.service.lockDelayOf(name)).toBeGreaterThan(0);
      // A waiter is granted once the delay has passed, not before.
      const next = await ctx.service.acquire({ name, owner: 'c', ttlMs: 5_000, waitMs: 15_000 });
      expect(performance.now() - endedAt).toBeGreaterThanOrEqual(DELAY_MS - 50);
      expect(next.token).toBeGreaterThan(first.token);
      expect(await ctx.service.lockDelayOf(name)).toBe(0);
    });

    it('a release ends the lease with no delay', async (test) => {
      gate(test);
      const name = lockName('delay-release');
      const lease = await delayed(name, 5_000);
      await ctx.service.release({ name, token: lease.token });
      expect(await ctx.service.lockDelayOf(name)).toBe(0);
      const next = await ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 });
      expect(next.token).toBeGreaterThan(lease.token);
    });

    it('a revocation starts the delay from the revocation', async (test) => {
      gate(test);
      const name = lockName('delay-revoke');
      await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, lockDelayMs: DELAY_MS });
      const revokedAt = performance.now();
      expect(await ctx.service.revoke(name)).not.toBeNull();
      const refused = await failure(ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 }));
      expect(refused.code).toBe('LOCK_HELD');
      expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(DELAY_MS / 2);
      // Granted once the delay from the revocation (not from the lease's end, 30 s away) has
      // passed; a backend that counts delays on its lease clock (etcd: whole seconds, expired
      // leases ended twice a second) may let the waiter in up to `expirySlack` late.
      const next = await ctx.service.acquire({
        name,
        owner: 'b',
        ttlMs: 5_000,
        waitMs: DELAY_MS + expirySlack(ctx.caps),
      });
      expect(next.owner).toBe('b');
      expect(performance.now() - revokedAt).toBeGreaterThanOrEqual(DELAY_MS - 50);
    });

    it('an extend carries the delay to the new end', async (test) => {
      gate(test);
      const name = lockName('delay-extend');
      const ttl = shortTtl(ctx.caps);
      const lease = await delayed(name, ttl);
      await ctx.service.extend({ name, token: lease.token, ttlMs: 5_000 });
      await ctx.service.revoke(name);
      expect(
        (await failure(ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 }))).details
          .lockDelayRemainingMs,
      ).toBeGreaterThan(0);
    });

    it('another server of the deployment keeps the delay too (it lives in the backend)', async (test) => {
      gate(test);
      const other = await ctx.otherService();
      await expectDelayedAcross(ctx.service, other, lockName('delay-across'), ctx);
    });

    it('a dlm server that restarts finds the delay where it left it', async (test) => {
      gate(test);
      const name = lockName('delay-server-restart');
      await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, lockDelayMs: 10_000 });
      await ctx.service.revoke(name);
      // A new server on the same store (a new backend instance: nothing carried over in memory).
      const restarted = await ctx.otherService();
      const refused = await failure(restarted.acquire({ name, owner: 'b', ttlMs: 5_000 }));
      expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(5_000);
    });

    it('the delay survives a restart of the store', async (test) => {
      gate(test);
      if (!ctx.caps.durableAcrossRestart || !ctx.target.restart) {
        test.skip('no capabilities.durableAcrossRestart, or a target that cannot restart');
      }
      const name = lockName('delay-store-restart');
      await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, lockDelayMs: 20_000 });
      await ctx.service.revoke(name);
      await ctx.restartStore();
      const refused = await failure(ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 }));
      expect(refused.code).toBe('LOCK_HELD');
      expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(0);
    });

    it('lockDelayMs over the limit, negative, or on a shared lock is INVALID_PARAMS naming it', async () => {
      const name = lockName('delay-bad');
      const max = ctx.service.limits.maxLockDelayMs;
      for (const lockDelayMs of [max + 1, -1, 1.5]) {
        const error = await failure(
          ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, lockDelayMs }),
        );
        expect(error.code).toBe('INVALID_PARAMS');
        expect(error.details.field).toBe('lockDelayMs');
      }
      if (ctx.caps.sharedModes) {
        const shared = await failure(
          ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, mode: 'shared', lockDelayMs: 10 }),
        );
        expect(shared.details.field).toBe('lockDelayMs');
      }
      if (!ctx.caps.lockDelay) {
        const unsupported = await failure(
          ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, lockDelayMs: 10 }),
        );
        expect(unsupported.details.field).toBe('lockDelayMs');
      }
      // lockDelayMs 0 is no delay, on every backend.
      await ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, lockDelayMs: 0 });
    });
  });
}

/** Expired on one server: the other refuses it within the delay, then grants it after. */
async function expectDelayedAcross(
  first: LockService,
  other: LockService,
  name: string,
  ctx: ConformanceContext,
): Promise<void> {
  const ttl = shortTtl(ctx.caps);
  await first.acquire({ name, owner: 'a', ttlMs: ttl, lockDelayMs: DELAY_MS });
  await expired(other, name, ctx);
  const refused = await failure(other.acquire({ name, owner: 'b', ttlMs: 5_000 }));
  expect(refused.code).toBe('LOCK_HELD');
  expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(0);
  const next = await other.acquire({
    name,
    owner: 'b',
    ttlMs: 5_000,
    waitMs: DELAY_MS + ttl + expirySlack(ctx.caps),
  });
  expect(next.owner).toBe('b');
}

/**
 * Until `name`'s lease has ended by expiry and its delay runs, as `service` reads it (a
 * backend that adds a margin for clock drift, as Redlock does, holds the lease longer than asked).
 */
function expired(service: LockService, name: string, ctx: ConformanceContext): Promise<void> {
  return until(async () => (await service.lockDelayOf(name)) > 0, {
    timeoutMs: shortTtl(ctx.caps) + expirySlack(ctx.caps),
    what: `the lease of ${name} to have expired into its lock-delay`,
  });
}
