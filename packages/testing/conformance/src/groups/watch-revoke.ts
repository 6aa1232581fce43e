import type { LockChange, LockService, LostEvent } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { expirySlack, failure, lockName, shortTtl } from '../support.js';
import { sleep } from '../wait.js';

/**
 * Watch and revoke: grants, releases and expiries reach watchers on every instance; revoke ends
 * the lease and tells the holder.
 */
export function watchAndRevokeGroup(ctx: ConformanceContext): void {
  describe('watch and revoke', () => {
    it('watch reports grants and releases', async () => {
      const name = lockName('watch');
      const changes: LockChange[] = [];
      const stop = ctx.service.watch(name, (change) => changes.push(change));
      // As the server's lock.watch does: subscribe, then read the state, then report.
      expect(await ctx.service.get(name)).toBeNull();
      const other = await ctx.otherService();
      const lease = await other.acquire({ name, owner: 'a', ttlMs: 10_000 });
      // Held for a moment: a grant released within one event round trip may reach watchers
      // only as its release (ZooKeeper's one-shot watches see the two writes as one change).
      await sleep(200);
      await other.release({ name, token: lease.token });
      const deadline = performance.now() + 2_000;
      while (!changes.some((c) => !c.held) && performance.now() < deadline) await sleep(20);
      stop();
      expect(changes.at(-1)).toMatchObject({ name, held: false, type: 'released' });
      // The protocol promises a change on every grant, whatever the backend.
      expect(changes.find((c) => c.held)).toMatchObject({
        held: true,
        type: 'acquired',
        token: lease.token,
        owner: 'a',
      });
    });

    it('watch reports an expiry within the lease plus a small bound, on every instance', async () => {
      const name = lockName('watch-expiry');
      const ttl = shortTtl(ctx.caps);
      const newInstance = async () => {
        const other = await ctx.otherService();
        return other;
      };
      const [remote, late] = [await newInstance(), await newInstance()];
      const ends = new Map<string, { change: LockChange; at: number }>();
      const follow = (label: string, svc: LockService) =>
        svc.watch(name, (change) => {
          if (!change.held && !ends.has(label)) ends.set(label, { change, at: performance.now() });
        });
      // Watchers on the granting instance and on another one, watching before the grant...
      const stops = [follow('granting', ctx.service), follow('remote', remote)];
      const started = performance.now();
      const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
      // ...and one on a third instance that starts watching only once the lock is held.
      await sleep(Math.min(100, ttl / 3));
      stops.push(follow('late', late));
      const deadline = started + ttl + expirySlack(ctx.caps);
      while (ends.size < 3 && performance.now() < deadline) await sleep(10);
      for (const stop of stops) stop();
      for (const label of ['granting', 'remote', 'late']) {
        const end = ends.get(label);
        expect(end, `the ${label} watcher heard the expiry`).toBeDefined();
        expect(end!.change).toMatchObject({
          name,
          held: false,
          type: 'expired',
          token: lease.token,
        });
        expect(end!.at - started).toBeGreaterThanOrEqual(ttl - 50);
      }
    });

    it('a watcher on another instance hears a lease extended there end only when it runs out', async () => {
      const name = lockName('watch-extended');
      const ttl = shortTtl(ctx.caps);
      const remote = await ctx.otherService();
      const changes: LockChange[] = [];
      const stop = remote.watch(name, (change) => changes.push(change));
      const lease = await ctx.service.acquire({ name, owner: 'a', ttlMs: ttl });
      const longer = ttl + 2 * expirySlack(ctx.caps);
      await ctx.service.extend({ name, token: lease.token, ttlMs: longer });
      const extendedAt = performance.now();
      await sleep(ttl + expirySlack(ctx.caps) / 2);
      // Past the first deadline, the lease still runs: no watcher may have been told it ended.
      expect(changes.filter((c) => !c.held)).toEqual([]);
      const deadline = extendedAt + longer + expirySlack(ctx.caps);
      while (!changes.some((c) => !c.held) && performance.now() < deadline) await sleep(10);
      stop();
      expect(changes.find((c) => !c.held)).toMatchObject({ held: false, type: 'expired' });
      expect(performance.now() - extendedAt).toBeGreaterThanOrEqual(longer - 50);
    });

    it('revoke ends the lease: the holder is told revoked, the next waiter gets a higher token', async () => {
      const name = lockName('revoke');
      const lost: LostEvent[] = [];
      const holder = await ctx.service.acquire({
        name,
        owner: 'a',
        ttlMs: 30_000,
        onLost: (e) => lost.push(e),
      });
      const waiting = ctx.service.acquire({ name, owner: 'b', ttlMs: 5_000, waitMs: 10_000 });
      await sleep(50);
      const revoked = await ctx.service.revoke(name);
      expect(revoked?.token).toBe(holder.token);
      const next = await waiting;
      expect(next.token).toBeGreaterThan(holder.token);
      expect(lost).toEqual([{ name, token: holder.token, reason: 'revoked' }]);
      expect((await failure(ctx.service.release({ name, token: holder.token }))).code).toBe(
        'NOT_HOLDER',
      );
    });
  });
}
