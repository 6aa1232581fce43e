import { createLeaseKey, hashLeaseKey, type LockChange, type LostEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import {
  expirySlack,
  failure,
  lockName,
  shortTtl,
  withContext,
  withoutNotifications,
} from '../support.js';
import { sleep } from '../wait.js';

/**
 * Lease keys (two-server): the token alone does not prove holding on another server; the key does,
 * and it never shows in get, watch or list.
 */
export function leaseKeysGroup(ctx: ConformanceContext): void {
  describe('only the holder (lease key)', () => {
    it(
      'release and extend with the token but without the key, from another server, are NOT_HOLDER',
      withContext(ctx, tokenAloneIsNotHolder),
    );
    // lock.lost and watches: not through a door without a session.
    it.skipIf(withoutNotifications(ctx))(
      "a wrong key on the granting server leaves the holder's lease as it was, lock.lost included",
      withContext(ctx, wrongKeyHereChangesNothing),
    );
    it(
      'release and extend with the key work from another server (a holder that reconnected)',
      withContext(ctx, keyWorksFromAnotherServer),
    );
    it(
      'a wrong key gets the same NOT_HOLDER message as a token that no longer holds',
      withContext(ctx, wrongKeySaysNoMore),
    );
    it(
      're-acquire by owner from another server: LOCK_HELD without the key, the same lease with it',
      withContext(ctx, reacquireNeedsTheKey),
    );
    it.skipIf(withoutNotifications(ctx))(
      'a client-chosen key is kept, a fresh one is made otherwise, and neither shows in get or watch',
      withContext(ctx, keyNeverShows),
    );
  });
}

async function tokenAloneIsNotHolder(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-token-only');
  const lease = await ctx.service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
  const other = await ctx.otherService();
  // Everything a non-holder can learn: the token and owner (lock.get shows both).
  const seen = await other.get(name);
  expect(seen?.token).toBe(lease.token);
  expect((await failure(other.release({ name, token: lease.token }))).code).toBe('NOT_HOLDER');
  expect((await failure(other.extend({ name, token: lease.token, ttlMs: 10_000 }))).code).toBe(
    'NOT_HOLDER',
  );
  const wrongKey = createLeaseKey();
  expect(
    (await failure(other.release({ name, token: lease.token, leaseKey: wrongKey }))).code,
  ).toBe('NOT_HOLDER');
  expect(
    (
      await failure(
        ctx.service.extend({ name, token: lease.token, ttlMs: 10_000, leaseKey: wrongKey }),
      )
    ).code,
  ).toBe('NOT_HOLDER');
  const state = await ctx.service.get(name);
  expect(state?.token).toBe(lease.token);
  expect(state?.owner).toBe('holder-1');
  // The holder itself still can (the service that granted it, without the key).
  await ctx.service.extend({ name, token: lease.token, ttlMs: 10_000 });
  await ctx.service.release({ name, token: lease.token });
  expect(await ctx.service.get(name)).toBeNull();
}

async function wrongKeyHereChangesNothing(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-wrong-here');
  const lost: LostEvent[] = [];
  const ttlMs = shortTtl(ctx.caps);
  const lease = await ctx.service.acquire({
    name,
    owner: 'holder-1',
    ttlMs,
    onLost: (event) => lost.push(event),
  });
  const wrongKey = createLeaseKey();
  expect(
    (await failure(ctx.service.release({ name, token: lease.token, leaseKey: wrongKey }))).code,
  ).toBe('NOT_HOLDER');
  // Still the holder's: its keyless extend works, and it hears the lease end.
  await ctx.service.extend({ name, token: lease.token, ttlMs });
  await sleep(ttlMs + expirySlack(ctx.caps));
  expect(lost).toHaveLength(1);
  expect(lost[0]).toMatchObject({ name, token: lease.token, reason: 'expired' });
}

async function keyWorksFromAnotherServer(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-other-server');
  const lease = await ctx.service.acquire({
    name,
    owner: 'holder-1',
    ttlMs: shortTtl(ctx.caps),
  });
  const other = await ctx.otherService();
  const { leaseKey } = lease;
  const extended = await other.extend({ name, token: lease.token, ttlMs: 10_000, leaseKey });
  expect(extended.token).toBe(lease.token);
  expect(extended.ttlMs).toBeGreaterThanOrEqual(10_000);
  await sleep(shortTtl(ctx.caps) + expirySlack(ctx.caps));
  expect((await ctx.service.get(name))?.token).toBe(lease.token);
  await other.release({ name, token: lease.token, leaseKey });
  expect(await ctx.service.get(name)).toBeNull();
}

async function wrongKeySaysNoMore(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-message');
  const lease = await ctx.service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
  const other = await ctx.otherService();
  const wrongKey = await failure(
    other.release({ name, token: lease.token, leaseKey: createLeaseKey() }),
  );
  const noKey = await failure(other.release({ name, token: lease.token }));
  await ctx.service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
  const released = await failure(
    other.release({ name, token: lease.token, leaseKey: lease.leaseKey }),
  );
  expect(wrongKey.code).toBe('NOT_HOLDER');
  expect(wrongKey.message).toBe(released.message);
  expect(noKey.message).toBe(released.message);
  expect(wrongKey.message).not.toContain(lease.leaseKey);
}

async function reacquireNeedsTheKey(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-reacquire');
  const lease = await ctx.service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
  const other = await ctx.otherService();
  const stolen = await failure(other.acquire({ name, owner: 'holder-1', ttlMs: 10_000 }));
  expect(stolen.code).toBe('LOCK_HELD');
  const guessed = await failure(
    other.acquire({ name, owner: 'holder-1', ttlMs: 10_000, leaseKey: createLeaseKey() }),
  );
  expect(guessed.code).toBe('LOCK_HELD');
  // On the granting server too: a different key for the same owner is another requester.
  expect(
    (
      await failure(
        ctx.service.acquire({
          name,
          owner: 'holder-1',
          ttlMs: 10_000,
          leaseKey: createLeaseKey(),
        }),
      )
    ).code,
  ).toBe('LOCK_HELD');
  const again = await other.acquire({
    name,
    owner: 'holder-1',
    ttlMs: 10_000,
    leaseKey: lease.leaseKey,
  });
  expect(again.token).toBe(lease.token);
  expect(again.leaseKey).toBe(lease.leaseKey);
  // A re-sent acquire that waits (after a lost reply) learns the same outcome.
  const waited = await other.acquire({
    name,
    owner: 'holder-1',
    ttlMs: 10_000,
    waitMs: 2_000,
    leaseKey: lease.leaseKey,
  });
  expect(waited.token).toBe(lease.token);
  // A waiting impostor (owner, no key) is a different requester: it waits and times out.
  const impostor = await ctx.otherService();
  const waiting = await failure(
    impostor.acquire({ name, owner: 'holder-1', ttlMs: 10_000, waitMs: 300 }),
  );
  expect(waiting.code).toBe('LOCK_HELD');
  expect((await ctx.service.get(name))?.token).toBe(lease.token);
}

async function keyNeverShows(ctx: ConformanceContext): Promise<void> {
  const name = lockName('key-hidden');
  const changes: LockChange[] = [];
  const other = await ctx.otherService();
  const stop = other.watch(name, (change) => changes.push(change));
  const chosen = createLeaseKey();
  const lease = await ctx.service.acquire({
    name,
    owner: 'holder-1',
    ttlMs: 10_000,
    leaseKey: chosen,
  });
  expect(lease.leaseKey).toBe(chosen);
  const state = await other.get(name);
  await ctx.service.release({ name, token: lease.token, leaseKey: chosen });
  const made = await ctx.service.acquire({ name, owner: 'holder-2', ttlMs: 10_000 });
  expect(made.leaseKey).toMatch(/^[A-Za-z0-9_-]{22,128}$/);
  expect(made.leaseKey).not.toBe(chosen);
  const listed = (await ctx.service.backend.list?.('conformance/key-hidden/')) ?? [];
  await ctx.service.release({ name, token: made.token });
  const deadline = performance.now() + 2_000;
  while (changes.filter((c) => !c.held).length < 2 && performance.now() < deadline) {
    await sleep(20);
  }
  stop();
  const seen = JSON.stringify([state, changes, listed], (_, v) =>
    typeof v === 'bigint' ? v.toString() : v,
  );
  for (const secret of [chosen, made.leaseKey]) {
    expect(seen).not.toContain(secret);
    expect(seen).not.toContain(hashLeaseKey(secret));
  }
}
