import {
  type AcquireRequest,
  type AcquireResult,
  type Grant,
  hashLeaseKey,
  type LockBackend,
  type LockEvent,
} from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { sharedModesTest } from '../shared-support.js';
import { expirySlack, lockName, type Skippable, shortTtl } from '../support.js';
import { sleep, until } from '../wait.js';

/**
 * The backend tier of shared modes: the adapter's own primitives (`tryAcquire`, `release`,
 * `extend`, `inspect`, `watch`, `revoke`, `list`) held to the contract directly, on two backends
 * of one store where two servers matter, for backends with `capabilities.sharedModes`. The
 * service-level groups (shared-rules, shared-queue) check what core builds on them.
 */
export function sharedPrimitivesGroup(ctx: ConformanceContext): void {
  describe("shared modes: the backend's primitives", () => {
    it(
      'shared holders up to the limit on two servers, tokens rising; the next refused with the soonest end, an exclusive one with the latest',
      sharedModesTest(ctx, upToTheLimit),
    );
    it(
      'an exclusive holder keeps shared requests out and a shared one keeps exclusive ones out; tokens rise across modes',
      sharedModesTest(ctx, modesExcludeEachOther),
    );
    it(
      'conflicts: the same owner and key in the other mode, another limit (theirs, from anyone); another key is another requester',
      sharedModesTest(ctx, conflictsAnswered),
    );
    it(
      'the same owner and key get their holder back refreshed (same token, longer or shorter); another key of that owner is a holder of its own',
      sharedModesTest(ctx, refreshKeepsToken),
    );
    it(
      'release and extend by token and key touch that holder only, from either server; a wrong key or token changes nothing; a token-only release ends it',
      sharedModesTest(ctx, perHolderReleaseAndExtend),
    );
    it(
      'an expiry ends that holder only and frees its room (with expiryEvents, one expired event of its own, unprompted)',
      sharedModesTest(ctx, expiryEndsOneHolder),
    );
    it(
      'watch reports each shared grant with its mode and each holder’s end as its own event',
      sharedModesTest(ctx, watchPerHolder),
    );
    it(
      'revoke ends every holder at once, each with its own revoked event heard on the other server',
      sharedModesTest(ctx, revokeEndsAll),
    );
    it(
      'concurrent shared try-locks with limit L on two servers grant exactly L (at most L with best-effort fencing), and an exclusive race beside them none',
      sharedModesTest(ctx, concurrentTryLocks),
    );
  });
}

/** A key hash as core makes them (`hashLeaseKey`), one per owner label. */
const keyOf = (owner: string) => hashLeaseKey(`conformance-key-of-${owner}`);

function shared(
  name: string,
  owner: string,
  limit: number,
  ttlMs = 10_000,
  keyHash = keyOf(owner),
): AcquireRequest {
  return { name, owner, ttlMs, keyHash, mode: 'shared', limit };
}

function exclusive(
  name: string,
  owner: string,
  ttlMs = 10_000,
  keyHash = keyOf(owner),
): AcquireRequest {
  return { name, owner, ttlMs, keyHash };
}

/**
 * Every event `backend`'s watch of `name` reports, from now on: followed (`followChanges`, as
 * core does for a watched name), and once an `inspect` after it answered, every change counts.
 */
async function recorded(backend: LockBackend, name: string) {
  const events: LockEvent[] = [];
  const unfollow = backend.followChanges?.(name);
  const unwatch = backend.watch(name, (event) => events.push(event));
  await backend.inspect(name);
  const stop = () => {
    unwatch();
    unfollow?.();
  };
  return { events, stop };
}

function grantOf(result: AcquireResult): Grant {
  if (!result.granted) throw new Error(`expected a grant, got ${JSON.stringify(result)}`);
  return result.grant;
}

/** Refused, not in conflict; `ttlRemainingMs` (the end that would let it in) within the bounds. */
function expectRefused(result: AcquireResult, atLeastMs: number, atMostMs: number): void {
  expect(result.granted).toBe(false);
  if (result.granted) return;
  expect(result.conflict).toBeUndefined();
  expect(result.ttlRemainingMs).toBeGreaterThan(atLeastMs);
  expect(result.ttlRemainingMs).toBeLessThanOrEqual(atMostMs);
}

/** `ms` as the backend grants it: raised to its minimum, rounded up to its granularity. */
function ttl(ctx: ConformanceContext, ms: number): number {
  const { minTtlMs, ttlGranularityMs } = ctx.caps;
  return Math.ceil(Math.max(ms, minTtlMs) / ttlGranularityMs) * ttlGranularityMs;
}

async function upToTheLimit(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-limit');
  const [soon, mid, late] = [ttl(ctx, 2_000), ttl(ctx, 8_000), ttl(ctx, 9_000)];
  const r1 = grantOf(await a.tryAcquire(shared(name, 'r1', 3, soon)));
  const r2 = grantOf(await b.tryAcquire(shared(name, 'r2', 3, mid)));
  const r3 = grantOf(await a.tryAcquire(shared(name, 'r3', 3, late)));
  expect(r2.token).toBeGreaterThan(r1.token);
  expect(r3.token).toBeGreaterThan(r2.token);
  // At the limit: the soonest end (r1's) would let it in; an exclusive one, the latest (r3's).
  expectRefused(await b.tryAcquire(shared(name, 'r4', 3)), 0, soon);
  expectRefused(await b.tryAcquire(exclusive(name, 'w')), mid, late);
  const state = await a.inspect(name);
  expect(state).toMatchObject({ name, mode: 'shared', limit: 3, owner: 'r3', token: r3.token });
  expect(state?.holders?.map(({ owner, token }) => [owner, token])).toEqual([
    ['r1', r1.token],
    ['r2', r2.token],
    ['r3', r3.token],
  ]);
  // Each holder's own lease.
  expect(state?.holders?.[0]?.ttlRemainingMs).toBeLessThanOrEqual(soon);
  expect(state?.holders?.[2]?.ttlRemainingMs).toBeGreaterThan(mid - 1_000);
}

async function modesExcludeEachOther(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-modes');
  const held = ttl(ctx, 3_000);
  const w = grantOf(await a.tryAcquire(exclusive(name, 'w', held)));
  expectRefused(await b.tryAcquire(shared(name, 'r', 5)), 0, held);
  expect(await a.release({ name, token: w.token, keyHash: keyOf('w') })).toBe(true);
  const tokens = [w.token];
  for (let round = 0; round < 2; round += 1) {
    const r1 = grantOf(await b.tryAcquire(shared(name, `r${round}a`, 5)));
    const r2 = grantOf(await a.tryAcquire(shared(name, `r${round}b`, 5)));
    expect((await a.tryAcquire(exclusive(name, `w${round}`))).granted).toBe(false);
    expect(await a.inspect(name)).toMatchObject({ mode: 'shared', owner: `r${round}b` });
    await b.release({ name, token: r1.token, keyHash: keyOf(`r${round}a`) });
    await a.release({ name, token: r2.token, keyHash: keyOf(`r${round}b`) });
    const x = grantOf(await b.tryAcquire(exclusive(name, `x${round}`)));
    await a.release({ name, token: x.token, keyHash: keyOf(`x${round}`) });
    tokens.push(r1.token, r2.token, x.token);
  }
  // Every grant, either mode, above every earlier one.
  expect([...tokens].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))).toEqual(tokens);
  expect(new Set(tokens).size).toBe(tokens.length);
}

async function conflictsAnswered(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-conflicts');
  grantOf(await a.tryAcquire(shared(name, 'r', 3)));
  const limit3 = { granted: false, conflict: { field: 'limit', limit: 3 } };
  expect(await b.tryAcquire(shared(name, 'other', 4))).toEqual(limit3);
  expect(await b.tryAcquire(shared(name, 'r', 4))).toEqual(limit3);
  expect(await b.tryAcquire(exclusive(name, 'r'))).toEqual({
    granted: false,
    conflict: { field: 'mode' },
  });
  // Another requester (another owner, or the same owner with another key) is only refused.
  for (const request of [exclusive(name, 'w'), exclusive(name, 'r', 10_000, keyOf('r2'))]) {
    const refused = await b.tryAcquire(request);
    expect(refused.granted === false && refused.conflict).toBeUndefined();
  }
  const other = lockName('prim-conflicts-x');
  grantOf(await a.tryAcquire(exclusive(other, 'w')));
  expect(await b.tryAcquire(shared(other, 'w', 2))).toEqual({
    granted: false,
    conflict: { field: 'mode' },
  });
  const stranger = await b.tryAcquire(shared(other, 'w', 2, 10_000, keyOf('w2')));
  expect(stranger.granted === false && stranger.conflict).toBeUndefined();
  expect(stranger.granted).toBe(false);
}

async function refreshKeepsToken(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-refresh');
  const first = grantOf(await a.tryAcquire(shared(name, 'r1', 3, ttl(ctx, 2_000))));
  const other = grantOf(await a.tryAcquire(shared(name, 'r2', 3, ttl(ctx, 10_000))));
  const longer = ttl(ctx, 9_000);
  const again = grantOf(await b.tryAcquire(shared(name, 'r1', 3, longer)));
  expect(again.token).toBe(first.token);
  expect(again.ttlMs).toBeGreaterThanOrEqual(longer);
  // A shorter refresh moves that holder's end closer too.
  const shorter = ttl(ctx, 2_000);
  expect(grantOf(await b.tryAcquire(shared(name, 'r2', 3, shorter))).token).toBe(other.token);
  const state = await a.inspect(name);
  expect(state?.holders?.map((h) => h.token)).toEqual([first.token, other.token]);
  expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(longer - 2_000);
  expect(state?.holders?.[1]?.ttlRemainingMs).toBeLessThanOrEqual(shorter);
  // The same owner with another key is another requester: a holder of its own, then the limit.
  const third = grantOf(await a.tryAcquire(shared(name, 'r1', 3, 10_000, keyOf('r1-other'))));
  expect(third.token).toBeGreaterThan(other.token);
  expect((await b.tryAcquire(shared(name, 'r1', 3, 10_000, keyOf('r1-third')))).granted).toBe(
    false,
  );
}

async function perHolderReleaseAndExtend(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-per-holder');
  const base = ttl(ctx, 10_000);
  const [r1, r2, r3] = [
    grantOf(await a.tryAcquire(shared(name, 'r1', 3, base))),
    grantOf(await a.tryAcquire(shared(name, 'r2', 3, base))),
    grantOf(await b.tryAcquire(shared(name, 'r3', 3, base))),
  ];
  // A wrong key, or another holder's token: nothing happens.
  expect(await b.release({ name, token: r1.token, keyHash: keyOf('r2') })).toBe(false);
  expect(await b.release({ name, token: r2.token, keyHash: keyOf('r1') })).toBe(false);
  expect(
    await a.extend({ name, token: r2.token, keyHash: keyOf('wrong'), ttlMs: base }),
  ).toBeNull();
  expect(
    await b.extend({ name, token: r3.token + 1_000n, keyHash: keyOf('r3'), ttlMs: base }),
  ).toBeNull();
  expect(await b.release({ name, token: r1.token, keyHash: keyOf('r1') })).toBe(true);
  expect(await b.release({ name, token: r1.token, keyHash: keyOf('r1') })).toBe(false);
  const longer = ttl(ctx, 20_000);
  // Extended through the other server than the one that granted it.
  const extended = await b.extend({ name, token: r2.token, keyHash: keyOf('r2'), ttlMs: longer });
  expect(extended).toMatchObject({ name, owner: 'r2', token: r2.token });
  expect(extended?.ttlMs).toBeGreaterThanOrEqual(longer);
  const state = await a.inspect(name);
  expect(state?.holders?.map((h) => h.owner)).toEqual(['r2', 'r3']);
  expect(state?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(base);
  expect(state?.holders?.[1]?.ttlRemainingMs).toBeLessThanOrEqual(base);
  if (a.list) {
    grantOf(await a.tryAcquire(exclusive(`${name}/x`, 'w')));
    const listed = await a.list(name);
    expect(listed.map((one) => one.name).sort()).toEqual([name, `${name}/x`]);
    const mine = listed.find((one) => one.name === name);
    expect(mine).toMatchObject({ mode: 'shared', limit: 3, owner: 'r3', token: r3.token });
    expect(mine?.holders?.map((h) => h.token)).toEqual([r2.token, r3.token]);
  }
  // An operator's release by token alone ends that holder.
  expect(await a.release({ name, token: r3.token })).toBe(true);
  expect((await a.inspect(name))?.holders?.map((h) => h.owner)).toEqual(['r2']);
  expect(await a.release({ name, token: r2.token, keyHash: keyOf('r2') })).toBe(true);
  expect(await a.inspect(name)).toBeNull();
  expect(grantOf(await b.tryAcquire(exclusive(name, 'x'))).token).toBeGreaterThan(r3.token);
}

async function expiryEndsOneHolder(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-expiry');
  const { events, stop } = await recorded(b, name);
  try {
    const short = grantOf(await a.tryAcquire(shared(name, 'short', 2, shortTtl(ctx.caps))));
    const long = grantOf(await b.tryAcquire(shared(name, 'long', 2, ttl(ctx, 20_000))));
    expect((await b.tryAcquire(shared(name, 'late', 2))).granted).toBe(false);
    const within = {
      timeoutMs: shortTtl(ctx.caps) + expirySlack(ctx.caps),
      what: 'the short holder to end',
    };
    const ended = (event: LockEvent) => event.type === 'expired' && event.token === short.token;
    // With expiry events nobody calls the backend until it says so itself.
    if (ctx.caps.expiryEvents) await until(() => events.some(ended), within);
    else await until(async () => (await a.inspect(name))?.holders?.length === 1, within);
    expect((await a.inspect(name))?.holders?.map((h) => h.token)).toEqual([long.token]);
    expect(
      await a.extend({ name, token: short.token, keyHash: keyOf('short'), ttlMs: 5_000 }),
    ).toBeNull();
    const late = grantOf(await b.tryAcquire(shared(name, 'late', 2)));
    expect(late.token).toBeGreaterThan(long.token);
    expect((await a.inspect(name))?.holders?.map((h) => h.owner)).toEqual(['long', 'late']);
    if (ctx.caps.expiryEvents) {
      // Told once: a step that drops the ended holder later does not announce it again.
      await sleep(200);
      expect(events.filter(ended)).toHaveLength(1);
    }
  } finally {
    stop();
  }
}

async function watchPerHolder(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-watch');
  const { events, stop } = await recorded(b, name);
  try {
    await sleep(100);
    const r1 = grantOf(await a.tryAcquire(shared(name, 'r1', 3)));
    const r2 = grantOf(await a.tryAcquire(shared(name, 'r2', 3)));
    const acquired = () => events.filter((e) => e.type === 'acquired');
    // Each grant heard before its end (a watch that never saw a holder cannot name its end).
    await until(() => acquired().length >= 2, { what: 'two grants heard' });
    // An end event names its lease where the backend can tell (Redlock's may not: "changed").
    const ended = (token: bigint) => () =>
      events.some((e) => e.type === 'released' && (e.token === undefined || e.token === token));
    await a.release({ name, token: r1.token, keyHash: keyOf('r1') });
    await until(ended(r1.token), { what: "r1's release heard" });
    await a.release({ name, token: r2.token, keyHash: keyOf('r2') });
    await until(ended(r2.token), { what: "r2's release heard" });
    const w = grantOf(await a.tryAcquire(exclusive(name, 'w')));
    await until(() => acquired().length >= 3, { what: 'three grants heard' });
    await sleep(100);
    const strict = ctx.caps.fencing === 'strict';
    const named = events.filter((e) => e.type === 'released' && e.token !== undefined);
    const tokens = named.map((e) => e.token);
    if (strict) expect(tokens).toEqual([r1.token, r2.token]);
    else expect(tokens.every((token) => token === r1.token || token === r2.token)).toBe(true);
    // An absent mode is exclusive (the contract's default).
    const grants = acquired().map(({ token, owner, mode }) => ({
      token,
      owner,
      mode: mode ?? 'exclusive',
    }));
    const expected = [
      { token: r1.token, owner: 'r1', mode: 'shared' },
      { token: r2.token, owner: 'r2', mode: 'shared' },
      { token: w.token, owner: 'w', mode: 'exclusive' },
    ];
    if (strict) expect(grants).toEqual(expected);
    else expect(grants).toEqual(expect.arrayContaining(expected));
    // Where the backend counts the holders in the same step, the count after each grant.
    const counts = acquired()
      .slice(0, 2)
      .map((e) => e.holders);
    if (counts.every((count) => count !== undefined)) expect(counts).toEqual([1, 2]);
  } finally {
    stop();
  }
}

async function revokeEndsAll(ctx: ConformanceContext, test: Skippable): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  // Capability gate: revoke is optional (core releases each holder by token without it).
  if (!a.revoke) test.skip('the backend has no revoke');
  const name = lockName('prim-revoke');
  const { events, stop } = await recorded(b, name);
  try {
    await sleep(100);
    const tokens = [
      grantOf(await a.tryAcquire(shared(name, 'r1', 3))).token,
      grantOf(await a.tryAcquire(shared(name, 'r2', 3))).token,
    ];
    // Each grant heard first (a watch that never saw a holder cannot name its end).
    await until(() => events.filter((e) => e.type === 'acquired').length >= 2, {
      what: 'two grants heard',
    });
    expect(await a.revoke!(name)).toBe(true);
    expect(await a.inspect(name)).toBeNull();
    const revoked = () => events.filter((e) => e.type === 'revoked').map((e) => e.token);
    await until(() => revoked().length >= 2, { what: 'two revoked events' });
    expect(new Set(revoked())).toEqual(new Set(tokens));
    expect(await b.revoke!(name)).toBe(false);
  } finally {
    stop();
  }
}

async function concurrentTryLocks(ctx: ConformanceContext): Promise<void> {
  const [a, b] = [ctx.backend, await ctx.secondBackend()];
  const name = lockName('prim-race');
  const limit = 4;
  const on = (i: number): LockBackend => (i % 2 ? a : b);
  const results = await Promise.all(
    Array.from({ length: 12 }, (_, i) => on(i).tryAcquire(shared(name, `c${i}`, limit))),
  );
  const grants = results.filter((result) => result.granted).map(grantOf);
  if (ctx.caps.fencing === 'strict') expect(grants).toHaveLength(limit);
  // Independent nodes may split the vote: fewer granted on a try-lock, never more.
  else expect(grants.length).toBeGreaterThan(0);
  expect(grants.length).toBeLessThanOrEqual(limit);
  expect(new Set(grants.map((grant) => grant.token)).size).toBe(grants.length);
  expect((await a.inspect(name))?.holders).toHaveLength(grants.length);
  const writers = await Promise.all([
    a.tryAcquire(exclusive(name, 'w1')),
    b.tryAcquire(exclusive(name, 'w2')),
  ]);
  expect(writers.some((result) => result.granted)).toBe(false);
}
