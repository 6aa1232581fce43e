import type { LockService, ReleaseRequestedEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName } from '../support.js';
import { pendingAfter, until } from '../wait.js';

/** How long a release request may take to reach a holder on another instance. */
const DELIVERY_MS = 5_000;

/** A lease of `name` for `owner` through `service`, with the release requests it hears. */
async function heldHearing(
  service: LockService,
  name: string,
  owner: string,
  onAsked?: (event: ReleaseRequestedEvent) => void,
) {
  const heard: ReleaseRequestedEvent[] = [];
  const lease = await service.acquire({
    name,
    owner,
    ttlMs: 30_000,
    onReleaseRequested: (event) => {
      heard.push(event);
      onAsked?.(event);
    },
  });
  return { lease, heard };
}

/**
 * Release requests: anyone may ask a name's holders to let go; each holder hears it on the
 * instance that follows its lease (the backend's event channel carries it between instances),
 * and nothing is released by it.
 */
export function releaseRequestsGroup(ctx: ConformanceContext): void {
  describe('release requests', () => {
    it('requestRelease on another instance reaches the holder and releases nothing', async () => {
      const name = lockName('request-release');
      const { lease, heard } = await heldHearing(ctx.service, name, 'holder');
      const other = await ctx.otherService();
      const asked = await other.requestRelease({ name, reason: 'deploy in progress' });
      expect(asked).toEqual({ name, notified: 1 });
      await until(() => heard.length > 0, { timeoutMs: DELIVERY_MS, what: 'the request heard' });
      expect(heard).toEqual([{ name, token: lease.token, reason: 'deploy in progress' }]);
      // Asking is not taking: the lease is still the holder's.
      expect(await other.get(name)).toMatchObject({ token: lease.token, owner: 'holder' });
      expect(ctx.service.holds(name, lease.token)).toBe(true);
      await ctx.service.release({ name, token: lease.token });
    });

    it('requestRelease of a free name notifies nobody', async () => {
      const name = lockName('request-release-free');
      expect(await ctx.service.requestRelease({ name })).toEqual({ name, notified: 0 });
    });

    it('a released lease hears no later request', async () => {
      const name = lockName('request-release-after');
      const gone = await heldHearing(ctx.service, name, 'gone');
      await ctx.service.release({ name, token: gone.lease.token });
      const other = await ctx.otherService();
      const next = await heldHearing(other, name, 'next');
      expect(await ctx.service.requestRelease({ name })).toEqual({ name, notified: 1 });
      await until(() => next.heard.length > 0, { timeoutMs: DELIVERY_MS, what: 'the request' });
      expect(next.heard).toEqual([{ name, token: next.lease.token }]);
      expect(gone.heard).toEqual([]);
      await other.release({ name, token: next.lease.token });
    });

    it('every shared holder, on either instance, hears one request', async (test) => {
      if (!ctx.caps.sharedModes) test.skip('the backend grants exclusive locks only');
      const name = lockName('request-release-shared');
      const other = await ctx.otherService();
      const heard: ReleaseRequestedEvent[] = [];
      const shared = { name, ttlMs: 10_000, mode: 'shared' as const, limit: 3 };
      const onReleaseRequested = (event: ReleaseRequestedEvent) => heard.push(event);
      const here = await ctx.service.acquire({ ...shared, owner: 'r1', onReleaseRequested });
      const there = await other.acquire({ ...shared, owner: 'r2', onReleaseRequested });
      expect(await ctx.service.requestRelease({ name, reason: 'x' })).toEqual({
        name,
        notified: 2,
      });
      await until(() => heard.length >= 2, { timeoutMs: DELIVERY_MS, what: 'both holders' });
      const tokens = heard.map((event) => event.token).sort((a, b) => (a < b ? -1 : 1));
      expect(tokens).toEqual([here.token, there.token]);
      await ctx.service.release({ name, token: here.token });
      await other.release({ name, token: there.token });
    });

    it('a waiting acquire with requestRelease asks the holder, who lets go', async () => {
      const name = lockName('request-release-wait');
      const { lease, heard } = await heldHearing(ctx.service, name, 'holder', (event) => {
        void ctx.service.release({ name, token: event.token });
      });
      const other = await ctx.otherService();
      const waiter = other.acquire({
        name,
        owner: 'waiter',
        ttlMs: 10_000,
        waitMs: 20_000,
        requestRelease: true,
      });
      const granted = await waiter;
      expect(heard).toEqual([{ name, token: lease.token }]);
      expect(granted.token > lease.token).toBe(true);
      await other.release({ name, token: granted.token });
    });

    it('a waiting acquire without requestRelease asks nobody', async () => {
      const name = lockName('request-release-none');
      const { lease, heard } = await heldHearing(ctx.service, name, 'holder');
      const other = await ctx.otherService();
      const controller = new AbortController();
      const waiter = other.acquire({
        name,
        owner: 'waiter',
        ttlMs: 10_000,
        waitMs: 20_000,
        signal: controller.signal,
      });
      expect(await pendingAfter(waiter, 500)).toBe(true);
      controller.abort();
      await failure(waiter);
      expect(heard).toEqual([]);
      await ctx.service.release({ name, token: lease.token });
    });

    it('a reason over 256 bytes, or not text, is INVALID_PARAMS naming reason', async () => {
      const name = lockName('request-release-bad');
      const long = await failure(ctx.service.requestRelease({ name, reason: 'é'.repeat(129) }));
      expect(long.code).toBe('INVALID_PARAMS');
      expect(long.details.field).toBe('reason');
      expect(long.message).toContain('256 UTF-8 bytes');
      const wrong = await failure(
        ctx.service.requestRelease({ name, reason: 42 as unknown as string }),
      );
      expect(wrong).toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'reason' } });
      // 256 bytes exactly is allowed.
      expect(await ctx.service.requestRelease({ name, reason: 'é'.repeat(128) })).toEqual({
        name,
        notified: 0,
      });
      const flag = await failure(
        ctx.service.acquire({
          name,
          owner: 'a',
          ttlMs: 1_000,
          requestRelease: 'yes' as unknown as boolean,
        }),
      );
      expect(flag).toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'requestRelease' } });
    });
  });
}
