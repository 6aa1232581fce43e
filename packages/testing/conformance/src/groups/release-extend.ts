import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, failure, lockName, shortTtl } from '../support.js';
import { sleep } from '../wait.js';

/**
 * Release and extend: only by the holder; a stale holder leaves the new holder's lock.
 */
export function releaseAndExtendGroup(ctx: ConformanceContext): void {
  describe('release and extend', () => {
    it('only the holder releases: a wrong token gets NOT_HOLDER and the lock stays', async () => {
      const name = lockName('release');
      const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: 10_000 });
      const error = await failure(ctx.service.release({ name, token: lease.token + 1000n }));
      expect(error.code).toBe('NOT_HOLDER');
      expect((await ctx.service.get(name))?.token).toBe(lease.token);
      await ctx.service.release({ name, token: lease.token });
      expect(await ctx.service.get(name)).toBeNull();
      expect((await failure(ctx.service.release({ name, token: lease.token }))).code).toBe(
        'NOT_HOLDER',
      );
    });

    it('only the holder extends, and extend resets the lease', async () => {
      const name = lockName('extend');
      const ttl = shortTtl(ctx.caps);
      const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
      expect(
        (await failure(ctx.service.extend({ name, token: lease.token + 1000n, ttlMs: ttl }))).code,
      ).toBe('NOT_HOLDER');
      const extended = await ctx.service.extend({ name, token: lease.token, ttlMs: 10_000 });
      expect(extended.token).toBe(lease.token);
      expect(extended.ttlMs).toBeGreaterThanOrEqual(10_000);
      await sleep(ttl + expirySlack(ctx.caps));
      const state = await ctx.service.get(name);
      expect(state?.token).toBe(lease.token);
    });

    it("release(token) by a stale holder leaves the new holder's lock", async () => {
      const name = lockName('stale');
      const ttl = shortTtl(ctx.caps);
      const stale = await ctx.service.acquire({ name, owner: 'old', ttlMs: ttl });
      await sleep(ttl + expirySlack(ctx.caps));
      const fresh = await ctx.service.acquire({ name, owner: 'new', ttlMs: 10_000, waitMs: 5_000 });
      expect(fresh.token).toBeGreaterThan(stale.token);
      expect((await failure(ctx.service.release({ name, token: stale.token }))).code).toBe(
        'NOT_HOLDER',
      );
      expect(
        (await failure(ctx.service.extend({ name, token: stale.token, ttlMs: ttl }))).code,
      ).toBe('NOT_HOLDER');
      const state = await ctx.service.get(name);
      expect(state?.owner).toBe('new');
      expect(state?.token).toBe(fresh.token);
    });
  });
}
