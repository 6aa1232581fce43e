import type { LostEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, lockName, shortTtl, withoutNotifications } from '../support.js';
import { sleep } from '../wait.js';

/**
 * Expiry: an unreleased lease ends and frees the lock, tokens keep increasing, get follows the
 * clock, and the holder hears lock.lost (expired).
 */
export function expiryGroup(ctx: ConformanceContext): void {
  describe('expiry', () => {
    it('an unreleased lease expires and the lock is free again', async () => {
      const name = lockName('expiry');
      const ttl = shortTtl(ctx.caps);
      await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
      await sleep(ttl + expirySlack(ctx.caps));
      const next = await ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000 });
      expect(next.owner).toBe('b');
    });

    it('tokens strictly increase across release and expiry', async () => {
      const name = lockName('tokens');
      const ttl = shortTtl(ctx.caps);
      const tokens: bigint[] = [];
      for (let i = 0; i < 3; i += 1) {
        const lease = await ctx.service.acquire({ name, owner: `r${i}`, ttlMs: 5_000 });
        tokens.push(lease.token);
        await ctx.service.release({ name, token: lease.token });
      }
      const expiring = await ctx.service.acquire({ name, owner: 'x', ttlMs: ttl });
      tokens.push(expiring.token);
      await sleep(ttl + expirySlack(ctx.caps));
      tokens.push(
        (await ctx.service.acquire({ name, owner: 'y', ttlMs: 5_000, waitMs: 5_000 })).token,
      );
      for (let i = 1; i < tokens.length; i += 1) {
        expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
      }
    });

    it('get reports the lease left by the clock, and nothing once it has run out', async () => {
      const name = lockName('clock');
      const ttl = Math.max(shortTtl(ctx.caps), 2 * ctx.caps.ttlGranularityMs + 1_000);
      const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
      const first = await ctx.service.get(name);
      const waitMs = ctx.caps.ttlGranularityMs + 300;
      await sleep(waitMs);
      const second = await ctx.service.get(name);
      expect(first?.token).toBe(lease.token);
      expect(second?.token).toBe(lease.token);
      expect(second!.ttlRemainingMs).toBeGreaterThan(0);
      // The lease left shrinks as time passes (to the backend's granularity).
      expect(second!.ttlRemainingMs).toBeLessThanOrEqual(
        first!.ttlRemainingMs - waitMs + ctx.caps.ttlGranularityMs + 50,
      );
      await sleep(second!.ttlRemainingMs + expirySlack(ctx.caps));
      expect(await ctx.service.get(name)).toBeNull();
    });

    // A door without a session has nobody to tell.
    it.skipIf(withoutNotifications(ctx))(
      'the holder is told lock.lost (expired) within its lease plus a small bound',
      async () => {
        const name = lockName('lost');
        const ttl = shortTtl(ctx.caps);
        const lost: Array<{ event: LostEvent; at: number }> = [];
        const started = performance.now();
        await ctx.service.acquire({
          name,
          owner: 'a',
          ttlMs: ttl,
          onLost: (event) => lost.push({ event, at: performance.now() }),
        });
        await sleep(ttl + expirySlack(ctx.caps));
        expect(lost).toHaveLength(1);
        expect(lost[0]!.event.reason).toBe('expired');
        expect(lost[0]!.event.name).toBe(name);
        expect(lost[0]!.at - started).toBeGreaterThanOrEqual(ttl - 50);
      },
    );
  });
}
