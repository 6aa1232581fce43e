import type { Lease, LockService, LostEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, failure, lockName, type Skippable, shortTtl } from '../support.js';
import { until } from '../wait.js';

/** The cap the group asks for: above a second (etcd's leases are whole seconds), short beside a test's budget. */
const HOLD_MS = 2_000;
/** An extend asking for far more than the cap leaves. */
const LONG_TTL_MS = 10_000;

/**
 * A cap on holding (`maxHoldMs`, with `capabilities.maxHold`): no extend keeps a lease past its
 * grant plus the cap, an extend that would is granted up to the cap, and at the cap the lease
 * ends and its holder hears `lost` with reason `maxHold`. The cap lives in the backend, beside
 * the lease, so another server of the deployment clamps by it too, and so does a restarted one.
 */
export function holdCapGroup(ctx: ConformanceContext): void {
  describe('hold cap', () => {
    const gate = (test: Skippable) => {
      // Capability gate: a backend that keeps no caps refuses maxHoldMs (tested below).
      if (!ctx.caps.maxHold) test.skip('no capabilities.maxHold');
    };

    it('an extend past the cap is granted up to it, and at the cap the holder hears lost (maxHold)', async (test) => {
      gate(test);
      const name = lockName('hold-cap');
      const lost: LostEvent[] = [];
      const startedAt = performance.now();
      const lease = await ctx.service.acquire({
        name,
        owner: 'a',
        ttlMs: shortTtl(ctx.caps),
        maxHoldMs: HOLD_MS,
        onLost: (event) => lost.push(event),
      });
      const extended = await ctx.service.extend({ name, token: lease.token, ttlMs: LONG_TTL_MS });
      expect(extended.ttlMs).toBeGreaterThan(0);
      expect(extended.ttlMs).toBeLessThanOrEqual(HOLD_MS);
      await until(() => lost.length > 0, {
        timeoutMs: HOLD_MS + expirySlack(ctx.caps),
        what: `the lease of ${name} to end at its cap`,
      });
      expect(lost).toEqual([{ name, token: lease.token, reason: 'maxHold' }]);
      // Not before the cap (a little early is the holder's side of the clock: never late).
      expect(performance.now() - startedAt).toBeGreaterThanOrEqual(HOLD_MS - 100);
      const refused = await failure(
        ctx.service.extend({ name, token: lease.token, ttlMs: LONG_TTL_MS }),
      );
      expect(refused.code).toBe('NOT_HOLDER');
      const next = await ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 });
      expect(next.token).toBeGreaterThan(lease.token);
    });

    it('a lease that is not extended ends at its TTL as before (lost: expired)', async (test) => {
      gate(test);
      const name = lockName('hold-cap-ttl');
      const lost: LostEvent[] = [];
      await ctx.service.acquire({
        name,
        owner: 'a',
        ttlMs: shortTtl(ctx.caps),
        maxHoldMs: 60_000,
        onLost: (event) => lost.push(event),
      });
      await until(() => lost.length > 0, {
        timeoutMs: shortTtl(ctx.caps) + expirySlack(ctx.caps),
        what: `the lease of ${name} to expire`,
      });
      expect(lost[0]?.reason).toBe('expired');
    });

    it('an idempotent re-acquire keeps the first grant’s cap', async (test) => {
      gate(test);
      const name = lockName('hold-cap-reacquire');
      const first = await capped(ctx.service, name);
      const again = await ctx.service.acquire({
        name,
        owner: 'a',
        ttlMs: LONG_TTL_MS,
        maxHoldMs: 60_000,
        leaseKey: first.leaseKey,
      });
      expect(again.token).toBe(first.token);
      expect(again.ttlMs).toBeLessThanOrEqual(HOLD_MS);
    });

    it('another server of the deployment clamps an extend by the cap (it lives in the backend)', async (test) => {
      gate(test);
      const name = lockName('hold-cap-across');
      const lease = await capped(ctx.service, name);
      const other = await ctx.otherService();
      await expectClampedOn(other, lease);
      await until(async () => (await other.get(name)) === null, {
        timeoutMs: HOLD_MS + expirySlack(ctx.caps),
        what: `the lease of ${name} to end at its cap`,
      });
    });

    it('a dlm server that restarts finds the cap where it left it', async (test) => {
      gate(test);
      const name = lockName('hold-cap-server-restart');
      const lease = await capped(ctx.service, name);
      // A new server on the same store (a new backend instance: nothing carried over in memory).
      const restarted = await ctx.otherService();
      await expectClampedOn(restarted, lease);
    });

    it('the cap survives a restart of the store', async (test) => {
      gate(test);
      if (!ctx.caps.durableAcrossRestart || !ctx.target.restart) {
        test.skip('no capabilities.durableAcrossRestart, or a target that cannot restart');
      }
      const name = lockName('hold-cap-store-restart');
      const lease = await ctx.service.acquire({
        name,
        owner: 'a',
        ttlMs: LONG_TTL_MS,
        maxHoldMs: 3 * LONG_TTL_MS,
      });
      await ctx.restartStore();
      const extended = await ctx.service.extend({
        name,
        token: lease.token,
        ttlMs: 6 * LONG_TTL_MS,
        leaseKey: lease.leaseKey,
      });
      expect(extended.ttlMs).toBeLessThanOrEqual(3 * LONG_TTL_MS);
    });

    it('maxHoldMs below ttlMs, over the limit, not an integer, or on a shared lock is INVALID_PARAMS naming it', async () => {
      const name = lockName('hold-cap-bad');
      const max = ctx.service.limits.maxHoldMs;
      for (const maxHoldMs of [4_999, max + 1, 5_000.5]) {
        const error = await failure(
          ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, maxHoldMs }),
        );
        expect(error.code).toBe('INVALID_PARAMS');
        expect(error.details.field).toBe('maxHoldMs');
        // In the caller's units; a backend without caps says so instead (and announces 0).
        if (ctx.caps.maxHold) expect(error.message).toMatch(/ ms\b|milliseconds/);
        else expect(max).toBe(0);
      }
      if (ctx.caps.sharedModes) {
        const shared = await failure(
          ctx.service.acquire({ name, owner: 'a', ttlMs: 5_000, mode: 'shared', maxHoldMs: 6_000 }),
        );
        expect(shared.details.field).toBe('maxHoldMs');
      }
    });
  });
}

/** `owner` a's lease on `name`, held for now, capped at the group's cap. */
function capped(service: LockService, name: string): Promise<Lease> {
  return service.acquire({ name, owner: 'a', ttlMs: 1_000, maxHoldMs: HOLD_MS });
}

/** An extend of `lease` through `service`, with its key, asking past the cap: granted up to it. */
async function expectClampedOn(service: LockService, lease: Lease): Promise<void> {
  const { name, token, leaseKey } = lease;
  const extended = await service.extend({ name, token, ttlMs: LONG_TTL_MS, leaseKey });
  expect(extended.token).toBe(token);
  expect(extended.ttlMs).toBeGreaterThan(0);
  expect(extended.ttlMs).toBeLessThanOrEqual(HOLD_MS);
}
