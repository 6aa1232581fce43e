import type { Lease } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName } from '../support.js';

/**
 * Durability: with `durableAcrossRestart` and a `restart` hook, tokens and held locks survive a
 * restart of the store.
 */
export function durabilityGroup(ctx: ConformanceContext): void {
  describe('durability', () => {
    it('tokens keep increasing and held locks stay held across a backend restart', async (test) => {
      // Capability gate: a backend that does not declare durability (or a target that cannot
      // restart it) cannot keep locks across a restart; nothing the service promises is skipped.
      if (!ctx.caps.durableAcrossRestart || !ctx.target.restart)
        test.skip('no capabilities.durableAcrossRestart, or a target that cannot restart');
      const released = lockName('durable-released');
      const held = lockName('durable-held');
      const first = await ctx.service.acquire({ name: released, owner: 'a', ttlMs: 5_000 });
      await ctx.service.release({ name: released, token: first.token });
      const holder: Lease = await ctx.service.acquire({
        name: held,
        owner: 'holder',
        ttlMs: 60_000,
      });
      await ctx.restartStore();
      const after = await ctx.service.acquire({ name: released, owner: 'b', ttlMs: 5_000 });
      expect(after.token).toBeGreaterThan(first.token);
      expect(
        (await failure(ctx.service.acquire({ name: held, owner: 'intruder', ttlMs: 5_000 }))).code,
      ).toBe('LOCK_HELD');
      // A restarted service has not granted it: the key proves holding.
      expect((await failure(ctx.service.release({ name: held, token: holder.token }))).code).toBe(
        'NOT_HOLDER',
      );
      await ctx.service.release({ name: held, token: holder.token, leaseKey: holder.leaseKey });
    });
  });
}
