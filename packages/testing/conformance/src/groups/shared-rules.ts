import {
  type AcquireOptions,
  createLeaseKey,
  type LockChange,
  type LockService,
  type LostEvent,
} from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { sharedModesTest } from '../shared-support.js';
import { failure, lockName } from '../support.js';
import { pendingAfter, sleep, until } from '../wait.js';

/** A semaphore of three permits. */
const PERMIT = { mode: 'shared', limit: 3 } as const;
/** A read lock: shared with the default limit. */
const READ = { mode: 'shared' } as const;

/**
 * The rules of shared holders, one at a time: tokens across modes, idempotent re-acquire,
 * conflicts, try-locks, `get`, per-holder release and extend, watch and revoke. For backends
 * with `capabilities.sharedModes`.
 */
export function sharedRulesGroup(ctx: ConformanceContext): void {
  describe('shared modes: the rules', () => {
    it(
      'tokens strictly increase across modes (S, S, X, S, S, X, S), over two servers',
      sharedModesTest(ctx, tokensIncreaseAcrossModes),
    );
    it(
      'the same owner and key in the same mode and limit get the same holder back, refreshed',
      sharedModesTest(ctx, sameModeReacquireRefreshes),
    );
    it(
      'the same owner and key in the other mode: INVALID_PARAMS naming mode, at once, the holder unchanged',
      sharedModesTest(ctx, otherModeIsRefused),
    );
    it(
      "a shared request with another limit: INVALID_PARAMS naming limit, with the holders' limit, at once",
      sharedModesTest(ctx, otherLimitIsRefused),
    );
    it(
      'a try-lock succeeds exactly when it would be granted at once',
      sharedModesTest(ctx, tryLockOnlyWhenGrantable),
    );
    it(
      'get lists every holder ordered by token, its top-level fields those of the highest token',
      sharedModesTest(ctx, getListsHolders),
    );
    it(
      "release and extend of one holder leave the others' leases",
      sharedModesTest(ctx, oneHolderAtATime),
    );
    it(
      "watch reports each holder's grant and end, with the count of holders after it",
      sharedModesTest(ctx, watchReportsEachHolder),
    );
    it(
      'revoke ends every holder: each is told revoked, the name is free, a waiting writer gets a higher token',
      sharedModesTest(ctx, revokeEndsEveryHolder),
    );
  });
}

/**
 * Two shared holders (through `first`, then `second`) and an exclusive waiter through `first`
 * behind them; both holders release, then the writer: the three tokens in grant order.
 */
async function readersThenWriter(
  first: LockService,
  second: LockService,
  name: string,
  [reader1, reader2, writer]: readonly [string, string, string],
): Promise<bigint[]> {
  const r1 = await first.acquire({ name, owner: reader1, ttlMs: 30_000, ...PERMIT });
  const r2 = await second.acquire({ name, owner: reader2, ttlMs: 30_000, ...PERMIT });
  // A writer waiting behind readers gets a token above theirs.
  const w = first.acquire({ name, owner: writer, ttlMs: 30_000, waitMs: 20_000 });
  await first.release({ name, token: r1.token });
  await second.release({ name, token: r2.token });
  const wToken = (await w).token;
  await first.release({ name, token: wToken });
  return [r1.token, r2.token, wToken];
}

async function tokensIncreaseAcrossModes(ctx: ConformanceContext): Promise<void> {
  const name = lockName('tokens-modes');
  const [a, b] = [ctx.service, await ctx.otherService()];
  const tokens = [
    ...(await readersThenWriter(a, b, name, ['s1', 's2', 'x1'])),
    ...(await readersThenWriter(b, a, name, ['s3', 's4', 'x2'])),
    (await a.acquire({ name, owner: 's5', ttlMs: 30_000, ...READ })).token,
  ];
  for (let i = 1; i < tokens.length; i += 1) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
}

async function sameModeReacquireRefreshes(ctx: ConformanceContext): Promise<void> {
  const name = lockName('shared-again');
  const leaseKey = createLeaseKey();
  const first = await ctx.service.acquire({
    name,
    owner: 'a',
    ttlMs: 2_000,
    leaseKey,
    ...PERMIT,
  });
  const other = await ctx.service.acquire({ name, owner: 'b', ttlMs: 30_000, ...PERMIT });
  await sleep(200);
  const again = await ctx.service.acquire({
    name,
    owner: 'a',
    ttlMs: 20_000,
    leaseKey,
    ...PERMIT,
  });
  expect(again.token).toBe(first.token);
  const holders = (await ctx.service.get(name))?.holders ?? [];
  expect(holders.map((h) => [h.owner, h.token])).toEqual([
    ['a', first.token],
    ['b', other.token],
  ]);
  // Refreshed: the lease now runs its new 20 s, not what was left of the first 2 s.
  expect(holders[0]!.ttlRemainingMs).toBeGreaterThan(10_000);
}

async function otherModeIsRefused(ctx: ConformanceContext): Promise<void> {
  const leaseKey = createLeaseKey();
  /** Owner `a`'s request for `name` with the one key: the mode (and wait) in `rest`. */
  const asA = (name: string, rest: Partial<AcquireOptions>) =>
    ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, leaseKey, ...rest });
  const sharedName = lockName('mode-conflict-s');
  const held = await asA(sharedName, READ);
  const started = performance.now();
  const upgrade = await failure(asA(sharedName, { waitMs: 10_000 }));
  expect(upgrade.code).toBe('INVALID_PARAMS');
  expect(upgrade.details.field).toBe('mode');
  // A conflict can never resolve by waiting: the answer comes at once.
  expect(performance.now() - started).toBeLessThan(2_000);
  expect(await ctx.service.get(sharedName)).toMatchObject({
    mode: 'shared',
    token: held.token,
    owner: 'a',
  });

  const exclusiveName = lockName('mode-conflict-x');
  const x = await asA(exclusiveName, {});
  const downgrade = await failure(asA(exclusiveName, READ));
  expect(downgrade.code).toBe('INVALID_PARAMS');
  expect(downgrade.details.field).toBe('mode');
  expect(await ctx.service.get(exclusiveName)).toMatchObject({ token: x.token, owner: 'a' });
}

async function otherLimitIsRefused(ctx: ConformanceContext): Promise<void> {
  const name = lockName('limit-conflict');
  await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, ...PERMIT });
  const other = await ctx.otherService();
  const started = performance.now();
  const error = await failure(
    other.acquire({
      name,
      owner: 'b',
      ttlMs: 30_000,
      waitMs: 10_000,
      mode: 'shared',
      limit: 4,
    }),
  );
  expect(error.code).toBe('INVALID_PARAMS');
  expect(error.details.field).toBe('limit');
  expect(error.details.limit).toBe(PERMIT.limit);
  expect(performance.now() - started).toBeLessThan(2_000);
  expect((await ctx.service.get(name))?.holders?.map((h) => h.owner)).toEqual(['a']);
}

/** The code a request that must fail fails with. */
const refused = async (request: Promise<unknown>) => (await failure(request)).code;

async function tryLockOnlyWhenGrantable(ctx: ConformanceContext): Promise<void> {
  const name = lockName('try-shared');
  const permit = { mode: 'shared', limit: 2 } as const;
  const a = await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, ...permit });
  // Room left: granted. At the limit: refused. Exclusive beside shared holders: refused.
  const b = await ctx.service.acquire({ name, owner: 'b', ttlMs: 30_000, ...permit });
  expect(await refused(ctx.service.acquire({ name, owner: 'c', ttlMs: 30_000, ...permit }))).toBe(
    'LOCK_HELD',
  );
  await ctx.service.release({ name, token: b.token });
  expect(await refused(ctx.service.acquire({ name, owner: 'x', ttlMs: 30_000 }))).toBe('LOCK_HELD');
  // An exclusive waiter queued here: a shared try-lock that would fit is refused (it would
  // jump the writer), and is granted again once the waiter has gone.
  const controller = new AbortController();
  const writer = ctx.service
    .acquire({ name, owner: 'w', ttlMs: 30_000, waitMs: 20_000, signal: controller.signal })
    .catch(() => undefined);
  await until(() => ctx.service.waiters(name) > 0, { what: 'the writer queued' });
  expect(await refused(ctx.service.acquire({ name, owner: 'c', ttlMs: 30_000, ...permit }))).toBe(
    'LOCK_HELD',
  );
  controller.abort();
  await writer;
  await until(() => ctx.service.waiters(name) === 0, { what: 'the writer gone' });
  const c = await ctx.service.acquire({ name, owner: 'c', ttlMs: 30_000, ...permit });
  expect(c.token).toBeGreaterThan(a.token);
  await ctx.service.release({ name, token: a.token });
  await ctx.service.release({ name, token: c.token });
  // Free: an exclusive try-lock is granted, and a shared one beside it refused.
  await ctx.service.acquire({ name, owner: 'x', ttlMs: 30_000 });
  expect(await refused(ctx.service.acquire({ name, owner: 'd', ttlMs: 30_000, ...permit }))).toBe(
    'LOCK_HELD',
  );
}

async function getListsHolders(ctx: ConformanceContext): Promise<void> {
  const name = lockName('get-holders');
  const other = await ctx.otherService();
  const a = await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, ...PERMIT });
  const b = await other.acquire({ name, owner: 'b', ttlMs: 20_000, ...PERMIT });
  const c = await ctx.service.acquire({ name, owner: 'c', ttlMs: 10_000, ...PERMIT });
  for (const service of [ctx.service, other]) {
    const state = await service.get(name);
    expect(state).toMatchObject({
      name,
      mode: 'shared',
      limit: PERMIT.limit,
      owner: 'c',
      token: c.token,
    });
    expect(state!.ttlRemainingMs).toBeLessThanOrEqual(10_000);
    expect(state!.holders!.map((h) => [h.owner, h.token])).toEqual([
      ['a', a.token],
      ['b', b.token],
      ['c', c.token],
    ]);
    const [ha, hb, hc] = state!.holders!;
    // Each holder's own lease: 30 s, 20 s and 10 s were asked for.
    expect(ha!.ttlRemainingMs).toBeGreaterThan(20_000);
    expect(hb!.ttlRemainingMs).toBeGreaterThan(10_000);
    expect(hb!.ttlRemainingMs).toBeLessThanOrEqual(20_000);
    expect(hc!.ttlRemainingMs).toBeLessThanOrEqual(10_000);
  }
}

async function oneHolderAtATime(ctx: ConformanceContext): Promise<void> {
  const name = lockName('one-holder');
  const a = await ctx.service.acquire({ name, owner: 'a', ttlMs: 10_000, ...READ });
  const b = await ctx.service.acquire({ name, owner: 'b', ttlMs: 10_000, ...READ });
  const extended = await ctx.service.extend({ name, token: b.token, ttlMs: 40_000 });
  expect(extended.token).toBe(b.token);
  let holders = (await ctx.service.get(name))?.holders ?? [];
  expect(holders.map((h) => h.owner)).toEqual(['a', 'b']);
  expect(holders[0]!.ttlRemainingMs).toBeLessThanOrEqual(10_000);
  expect(holders[1]!.ttlRemainingMs).toBeGreaterThan(30_000);
  await ctx.service.release({ name, token: a.token });
  holders = (await ctx.service.get(name))?.holders ?? [];
  expect(holders.map((h) => [h.owner, h.token])).toEqual([['b', b.token]]);
  // The released holder's token proves nothing any more; b's still does.
  expect((await failure(ctx.service.release({ name, token: a.token }))).code).toBe('NOT_HOLDER');
  expect((await failure(ctx.service.extend({ name, token: a.token, ttlMs: 5_000 }))).code).toBe(
    'NOT_HOLDER',
  );
  await ctx.service.release({ name, token: b.token });
  expect(await ctx.service.get(name)).toBeNull();
}

async function watchReportsEachHolder(ctx: ConformanceContext): Promise<void> {
  const name = lockName('watch-holders');
  const changes: LockChange[] = [];
  const stop = ctx.service.watch(name, (change) => changes.push(change));
  expect(await ctx.service.get(name)).toBeNull();
  const other = await ctx.otherService();
  const a = await other.acquire({ name, owner: 'a', ttlMs: 30_000, ...READ });
  await until(() => changes.length >= 1, { what: "a's grant reported" });
  const b = await other.acquire({ name, owner: 'b', ttlMs: 30_000, ...READ });
  await until(() => changes.length >= 2, { what: "b's grant reported" });
  // Held for a moment: a backend may report a grant and a release within one event round
  // trip as one change (see the watch group).
  await sleep(200);
  await other.release({ name, token: a.token });
  await until(() => changes.length >= 3, { what: "a's release reported" });
  await other.release({ name, token: b.token });
  await until(() => changes.some((c) => !c.held), { what: 'the last release reported' });
  stop();
  // `extended` (a check found a lease longer than core knew) is not a grant or an end.
  const seen = changes
    .filter((c) => c.type !== 'extended')
    .map((c) => [c.type, c.token, c.holders, c.held]);
  expect(seen).toEqual([
    ['acquired', a.token, 1, true],
    ['acquired', b.token, 2, true],
    ['released', a.token, 1, true],
    ['released', b.token, 0, false],
  ]);
  expect(changes.filter((c) => c.type === 'acquired').map((c) => [c.owner, c.mode])).toEqual([
    ['a', 'shared'],
    ['b', 'shared'],
  ]);
}

async function revokeEndsEveryHolder(ctx: ConformanceContext): Promise<void> {
  const name = lockName('revoke-all');
  const lost: LostEvent[] = [];
  const onLost = (event: LostEvent) => lost.push(event);
  const other = await ctx.otherService();
  const a = await ctx.service.acquire({ name, owner: 'a', ttlMs: 30_000, onLost, ...READ });
  const b = await other.acquire({ name, owner: 'b', ttlMs: 30_000, onLost, ...READ });
  const writer = ctx.service.acquire({ name, owner: 'w', ttlMs: 30_000, waitMs: 20_000 });
  expect(await pendingAfter(writer, 100)).toBe(true);
  expect(await ctx.service.revoke(name)).not.toBeNull();
  const w = await writer;
  expect(w.token).toBeGreaterThan(b.token);
  await until(() => lost.length >= 2, { what: 'both holders told' });
  expect(lost.sort((x, y) => Number(x.token - y.token))).toEqual([
    { name, token: a.token, reason: 'revoked' },
    { name, token: b.token, reason: 'revoked' },
  ]);
  expect((await ctx.service.get(name))?.holders?.map((h) => h.owner)).toEqual(['w']);
  for (const [service, token] of [
    [ctx.service, a.token],
    [other, b.token],
  ] as const) {
    expect((await failure(service.release({ name, token }))).code).toBe('NOT_HOLDER');
  }
}
