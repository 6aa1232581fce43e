import type { Lease, LockService } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName } from '../support.js';
import { sleep } from '../wait.js';

/** How long the overlapping-sets run lasts, and its shape (issue 18: 16 clients, 5 of 10). */
const RUN_MS = 10_000;
const CALLERS = 16;
const NAMES = 10;
const SET_SIZE = 5;

/** `count` distinct names of `names`, in random order. */
function randomSet(names: string[], count: number): string[] {
  const pool = [...names];
  for (let i = pool.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [pool[i], pool[j]] = [pool[j]!, pool[i]!];
  }
  return pool.slice(0, count);
}

interface RunTally {
  sets: number;
  failures: string[];
  /** A name held by two callers at once. */
  overlaps: number;
}

/**
 * One caller of the overlapping-sets run: takes random sets until the run ends, each held for a
 * moment. While a set is held, its names are marked in `holding`: a name marked twice is a
 * mutual-exclusion violation.
 */
async function caller(
  service: LockService,
  owner: string,
  names: string[],
  holding: Set<string>,
  endAt: number,
  tally: RunTally,
): Promise<void> {
  while (Date.now() < endAt) {
    const set = randomSet(names, SET_SIZE);
    let leases: Lease[];
    try {
      leases = await service.acquireAll({
        locks: set.map((name) => ({ name })),
        owner,
        ttlMs: 10_000,
        waitMs: 10_000,
      });
    } catch (error) {
      tally.failures.push(`${owner}: ${(error as Error).message}`);
      continue;
    }
    for (const name of set) {
      if (holding.has(name)) tally.overlaps += 1;
      holding.add(name);
    }
    await sleep(1);
    for (const name of set) holding.delete(name);
    await Promise.all(leases.map((lease) => service.release(lease)));
    tally.sets += 1;
  }
}

/**
 * Multi-locks (`acquireAll`): all or nothing, and no deadlock among any number of concurrent
 * calls over overlapping sets, on every backend (core takes the names in one canonical order
 * over the backend's exclusive primitive).
 */
export function multiLockGroup(ctx: ConformanceContext): void {
  describe('multi-lock (acquireAll)', () => {
    it('grants the whole set, each lock its own lease, in request order', async () => {
      const names = [lockName('set-c'), lockName('set-a'), lockName('set-b')];
      const leases = await ctx.service.acquireAll({
        locks: names.map((name) => ({ name })),
        owner: 'set',
        ttlMs: 5_000,
      });
      expect(leases.map((lease) => lease.name)).toEqual(names);
      for (const lease of leases) {
        expect((await ctx.service.get(lease.name))?.token).toBe(lease.token);
      }
    });

    it('all or nothing: a lock held on another server fails the set and frees the rest', async () => {
      const other = await ctx.otherService();
      const names = [lockName('aon-a'), lockName('aon-b'), lockName('aon-c')];
      await other.acquire({ name: names[1]!, owner: 'other', ttlMs: 5_000 });
      const error = await failure(
        ctx.service.acquireAll({
          locks: names.map((name) => ({ name })),
          owner: 'set',
          ttlMs: 5_000,
          waitMs: 300,
        }),
      );
      expect(error.code).toBe('LOCK_HELD');
      expect(error.details.name).toBe(names[1]);
      const owners = await Promise.all(names.map(async (name) => (await other.get(name))?.owner));
      expect(owners).toEqual([undefined, 'other', undefined]);
    });

    it(
      `${CALLERS} callers taking random sets of ${SET_SIZE} of ${NAMES} names all finish (no deadlock; over 4 servers with a fair queue)`,
      async () => {
        // Across servers only where the backend orders waiters itself (`fairQueue`). Elsewhere
        // FIFO holds per server, and one server's waiters can lose every race for a name to the
        // server that released it (its own queue hears of the release first): a wait may then
        // run out there with no deadlock at all.
        const servers = ctx.caps.fairQueue ? 4 : 1;
        const others = Array.from({ length: servers - 1 }, () => ctx.otherService());
        const services = [ctx.service, ...(await Promise.all(others))];
        const names = Array.from({ length: NAMES }, (_, i) => lockName(`overlap-${i}`));
        const holding = new Set<string>();
        const tally: RunTally = { sets: 0, failures: [], overlaps: 0 };
        const endAt = Date.now() + RUN_MS;
        await Promise.all(
          Array.from({ length: CALLERS }, (_, i) =>
            caller(services[i % services.length]!, `caller-${i}`, names, holding, endAt, tally),
          ),
        );
        expect(tally.overlaps).toBe(0);
        // A deadlock would leave callers waiting out their 10 s waits: none may fail.
        expect(tally.failures).toEqual([]);
        expect(tally.sets).toBeGreaterThan(CALLERS);
        // And nothing is left held.
        const left = await Promise.all(names.map((name) => ctx.service.get(name)));
        expect(left.filter((state) => state !== null)).toEqual([]);
      },
      RUN_MS + 30_000,
    );
  });
}
