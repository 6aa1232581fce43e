import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { requireSharedModes } from '../shared-support.js';
import { failure, lockName } from '../support.js';

/**
 * Multi-locks with shared entries (S8): a set mixing modes is granted as asked, and a set that
 * fails leaves none of its names held by its owner. For backends with `capabilities.sharedModes`.
 */
export function sharedMultiLockGroup(ctx: ConformanceContext): void {
  /** `count` names whose canonical (sorted) order is their index order. */
  const orderedNames = (prefix: string, count: number) =>
    Array.from({ length: count }, (_, i) => lockName(`${prefix}-${i}`));

  /** The owners holding `name` (empty when free). */
  const ownersOf = async (name: string) =>
    ((await ctx.service.get(name))?.holders ?? []).map((holder) => holder.owner);

  describe('shared modes: multi-lock (acquireAll)', () => {
    it("a set with shared entries is granted beside the names' other shared holders, each entry in its mode", async (test) => {
      requireSharedModes(ctx, test);
      const [shared, exclusive] = orderedNames('set-modes', 2) as [string, string];
      const other = await ctx.otherService();
      await other.acquire({
        name: shared,
        owner: 'reader',
        ttlMs: 30_000,
        mode: 'shared',
        limit: 2,
      });
      const leases = await ctx.service.acquireAll({
        locks: [{ name: exclusive }, { name: shared, mode: 'shared', limit: 2 }],
        owner: 'set',
        ttlMs: 30_000,
      });
      expect(leases.map((lease) => [lease.name, lease.mode, lease.limit])).toEqual([
        [exclusive, 'exclusive', undefined],
        [shared, 'shared', 2],
      ]);
      expect(await ownersOf(shared)).toEqual(['reader', 'set']);
      expect(await ownersOf(exclusive)).toEqual(['set']);
    });

    it('S8: a set whose last shared entry is full fails with LOCK_HELD naming it, and none of the set stays held', async (test) => {
      requireSharedModes(ctx, test);
      // The full entry comes last in the canonical order: the others were granted first and
      // must be given back.
      const [a, b, full] = orderedNames('set-full', 3) as [string, string, string];
      const other = await ctx.otherService();
      await other.acquire({ name: full, owner: 'holder', ttlMs: 30_000, mode: 'shared', limit: 1 });
      const error = await failure(
        ctx.service.acquireAll({
          locks: [
            { name: a, mode: 'shared', limit: 2 },
            { name: b },
            { name: full, mode: 'shared', limit: 1 },
          ],
          owner: 'set',
          ttlMs: 30_000,
          waitMs: 300,
        }),
      );
      expect(error.code).toBe('LOCK_HELD');
      expect(error.details.name).toBe(full);
      expect(await ownersOf(a)).toEqual([]);
      expect(await ownersOf(b)).toEqual([]);
      expect(await ownersOf(full)).toEqual(['holder']);
    });

    it('S8: a set whose shared entry conflicts on the limit fails with INVALID_PARAMS naming limit, and none of the set stays held', async (test) => {
      requireSharedModes(ctx, test);
      const [a, b, other3] = orderedNames('set-limit', 3) as [string, string, string];
      const other = await ctx.otherService();
      await other.acquire({
        name: other3,
        owner: 'holder',
        ttlMs: 30_000,
        mode: 'shared',
        limit: 3,
      });
      const error = await failure(
        ctx.service.acquireAll({
          locks: [
            { name: a },
            { name: b, mode: 'shared' },
            { name: other3, mode: 'shared', limit: 2 },
          ],
          owner: 'set',
          ttlMs: 30_000,
          waitMs: 2_000,
        }),
      );
      expect(error.code).toBe('INVALID_PARAMS');
      expect(error.details.field).toBe('limit');
      expect(await ownersOf(a)).toEqual([]);
      expect(await ownersOf(b)).toEqual([]);
      expect(await ownersOf(other3)).toEqual(['holder']);
    });
  });
}
