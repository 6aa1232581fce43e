import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { sharedModesTest } from '../shared-support.js';
import { expirySlack, failure, lockName, shortTtl, withContext } from '../support.js';
import { sleep } from '../wait.js';

/**
 * `lock.check` (`LockService.check`): whether a lease with a token holds a name now, as the
 * backend says, on this server and on another one of the deployment: true for the holder's
 * token (each shared holder's), false for any other token, a free name, and once the lease was
 * released or ran out; a malformed token is INVALID_PARAMS naming `token`.
 */
export function checkGroup(ctx: ConformanceContext): void {
  describe('check a token (lock.check)', () => {
    it(
      "the holder's token is current on every server; another token, a free name, a released lease are not",
      withContext(ctx, async (ctx) => {
        const name = lockName('check');
        const other = await ctx.otherService();
        expect(await ctx.service.check(name, 1n)).toBe(false);
        const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: 10_000 });
        expect(await ctx.service.check(name, lease.token)).toBe(true);
        expect(await other.check(name, lease.token)).toBe(true);
        expect(await other.check(name, lease.token + 1n)).toBe(false);
        expect(await other.check(lockName('check-free'), lease.token)).toBe(false);
        await ctx.service.release({ name, token: lease.token });
        expect(await other.check(name, lease.token)).toBe(false);
        expect(await ctx.service.check(name, lease.token)).toBe(false);
        const next = await other.acquire({ name, owner: 'b', ttlMs: 10_000 });
        expect(await ctx.service.check(name, next.token)).toBe(true);
        expect(await ctx.service.check(name, lease.token)).toBe(false);
        await other.release({ name, token: next.token });
      }),
    );

    it(
      'a lease that ran out without a release is not current, on either server',
      withContext(ctx, async (ctx) => {
        const name = lockName('check-expired');
        const other = await ctx.otherService();
        const ttl = shortTtl(ctx.caps);
        const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
        expect(await other.check(name, lease.token)).toBe(true);
        await sleep(ttl + expirySlack(ctx.caps));
        expect(await ctx.service.check(name, lease.token)).toBe(false);
        expect(await other.check(name, lease.token)).toBe(false);
      }),
    );

    it(
      "a shared name: each holder's token is current until that holder ends",
      sharedModesTest(ctx, async (ctx) => {
        const name = lockName('check-shared');
        const other = await ctx.otherService();
        const shared = { name, ttlMs: 10_000, mode: 'shared', limit: 3 } as const;
        const first = await ctx.service.acquire({ ...shared, owner: 'r1' });
        const second = await other.acquire({ ...shared, owner: 'r2' });
        for (const service of [ctx.service, other]) {
          expect(await service.check(name, first.token)).toBe(true);
          expect(await service.check(name, second.token)).toBe(true);
        }
        await ctx.service.release({ name, token: first.token });
        expect(await other.check(name, first.token)).toBe(false);
        expect(await other.check(name, second.token)).toBe(true);
        await other.release({ name, token: second.token });
        expect(await ctx.service.check(name, second.token)).toBe(false);
      }),
    );

    it(
      'a malformed token or name is INVALID_PARAMS naming the field',
      withContext(ctx, async (ctx) => {
        const name = lockName('check-bad');
        for (const token of [0n, -3n, 2n ** 63n]) {
          const error = await failure(ctx.service.check(name, token));
          expect(error.code).toBe('INVALID_PARAMS');
          expect(error.details.field).toBe('token');
        }
        const error = await failure(ctx.service.check('', 1n));
        expect(error.code).toBe('INVALID_PARAMS');
        expect(error.details.field).toBe('name');
      }),
    );
  });
}
