import type { LockSpec } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { sharedModesTest } from '../shared-support.js';
import { failure, lockName } from '../support.js';

/**
 * Multi-locks with shared entries (S8): a set mixing modes is granted as asked, and a set that
 * fails leaves none of its names held by its owner. For backends with `capabilities.sharedModes`.
 */
export function sharedMultiLockGroup(ctx: ConformanceContext): void {
  describe('shared modes: multi-lock (acquireAll)', () => {
    it(
      "a set with shared entries is granted beside the names' other shared holders, each entry in its mode",
      sharedModesTest(ctx, mixedSetIsGranted),
    );
    it(
      'S8: a set whose last shared entry is full fails with LOCK_HELD naming it, and none of the set stays held',
      sharedModesTest(ctx, fullEntryFailsTheSet),
    );
    it(
      'S8: a set whose shared entry conflicts on the limit fails with INVALID_PARAMS naming limit, and none of the set stays held',
      sharedModesTest(ctx, limitConflictFailsTheSet),
    );
  });
}

/** `count` names whose canonical (sorted) order is their index order. */
function orderedNames(prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => lockName(`${prefix}-${i}`));
}

/** The owners holding `name` (empty when free). */
async function ownersOf(ctx: ConformanceContext, name: string): Promise<string[]> {
  return ((await ctx.service.get(name))?.holders ?? []).map((holder) => holder.owner);
}

/** `owner` takes `name` in shared mode with `limit` through another server. */
async function holdSharedElsewhere(
  ctx: ConformanceContext,
  name: string,
  owner: string,
  limit: number,
): Promise<void> {
  const other = await ctx.otherService();
  await other.acquire({ name, owner, ttlMs: 30_000, mode: 'shared', limit });
}

/** How owner `set`'s acquireAll of `locks`, waiting up to `waitMs`, fails. */
function setFailure(ctx: ConformanceContext, locks: readonly LockSpec[], waitMs: number) {
  return failure(ctx.service.acquireAll({ locks, owner: 'set', ttlMs: 30_000, waitMs }));
}

/** After a failed set: none of `set` is held, and `held` only by its `holder` still. */
async function expectSetGivenBack(
  ctx: ConformanceContext,
  set: readonly string[],
  held: string,
): Promise<void> {
  for (const name of set) expect(await ownersOf(ctx, name)).toEqual([]);
  expect(await ownersOf(ctx, held)).toEqual(['holder']);
}

async function mixedSetIsGranted(ctx: ConformanceContext): Promise<void> {
  const [shared, exclusive] = orderedNames('set-modes', 2) as [string, string];
  await holdSharedElsewhere(ctx, shared, 'reader', 2);
  const leases = await ctx.service.acquireAll({
    locks: [{ name: exclusive }, { name: shared, mode: 'shared', limit: 2 }],
    owner: 'set',
    ttlMs: 30_000,
  });
  expect(leases.map((lease) => [lease.name, lease.mode, lease.limit])).toEqual([
    [exclusive, 'exclusive', undefined],
    [shared, 'shared', 2],
  ]);
  expect(await ownersOf(ctx, shared)).toEqual(['reader', 'set']);
  expect(await ownersOf(ctx, exclusive)).toEqual(['set']);
}

async function fullEntryFailsTheSet(ctx: ConformanceContext): Promise<void> {
  // The full entry comes last in the canonical order: the others were granted first and
  // must be given back.
  const [a, b, full] = orderedNames('set-full', 3) as [string, string, string];
  await holdSharedElsewhere(ctx, full, 'holder', 1);
  const error = await setFailure(
    ctx,
    [{ name: a, mode: 'shared', limit: 2 }, { name: b }, { name: full, mode: 'shared', limit: 1 }],
    300,
  );
  expect(error.code).toBe('LOCK_HELD');
  expect(error.details.name).toBe(full);
  await expectSetGivenBack(ctx, [a, b], full);
}

async function limitConflictFailsTheSet(ctx: ConformanceContext): Promise<void> {
  const [a, b, other3] = orderedNames('set-limit', 3) as [string, string, string];
  await holdSharedElsewhere(ctx, other3, 'holder', 3);
  const error = await failure(
    ctx.service.acquireAll({
      locks: [{ name: a }, { name: b, mode: 'shared' }, { name: other3, mode: 'shared', limit: 2 }],
      owner: 'set',
      ttlMs: 30_000,
      waitMs: 2_000,
    }),
  );
  expect(error.code).toBe('INVALID_PARAMS');
  expect(error.details.field).toBe('limit');
  expect(await ownersOf(ctx, a)).toEqual([]);
  expect(await ownersOf(ctx, b)).toEqual([]);
  expect(await ownersOf(ctx, other3)).toEqual(['holder']);
}
