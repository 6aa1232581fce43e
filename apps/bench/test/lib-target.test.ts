import { describe, expect, it } from 'vitest';
import { WaitTimeout } from '../src/lockers/locker.js';
import { createTargets, selectSpecs } from '../src/targets.js';
import { runContention } from '../src/workloads/contention.js';
import { runThroughput } from '../src/workloads/throughput.js';
import { runUncontended } from '../src/workloads/uncontended.js';

/** The library path (core + an adapter in this process) through the workloads, tiny counts. */
describe('lib-embedded: @dlm/core over the embedded adapter, in process', () => {
  const [target] = createTargets(selectSpecs(['lib-embedded']), {}, { pollMs: 10, runId: 't' });

  it('completes pairs in workloads 1, 2 and 5 and hands off with no violation in 3', async () => {
    const running = await target!.start();
    try {
      const ttlMs = 5_000;
      const uncontended = await runUncontended(running, 'lib1', {
        count: 20,
        warmup: 5,
        maxMs: 5_000,
        ttlMs,
      });
      expect(uncontended.acquire.count).toBe(20);
      expect(uncontended.errors).toBe(0);
      const window = { clients: 4, durationMs: 300, warmupMs: 50, ttlMs };
      for (const shared of [false, true]) {
        const throughput = await runThroughput(running, `lib2:${shared}`, { ...window, shared });
        expect(throughput.pairs).toBeGreaterThan(0);
        expect(throughput.errors).toBe(0);
      }
      const contention = await runContention(running, 'lib3', {
        clients: 3,
        durationMs: 300,
        warmupMs: 50,
        holdMs: 0,
        waitMs: 2_000,
        ttlMs,
      });
      expect(contention.violations).toBe(0);
      expect(contention.errors).toBe(0);
      expect(contention.handoffs).toBeGreaterThan(0);
    } finally {
      await running.stop();
    }
  });

  it('gives two callers of one locker their own owners: the second waits for the first', async () => {
    const running = await target!.start();
    const locker = await running.connect();
    try {
      const held = await locker.acquire('one-name', { ttlMs: 5_000, waitMs: 0 });
      // With one owner per locker, core would hand the same lease back (a re-acquire).
      await expect(locker.acquire('one-name', { ttlMs: 5_000, waitMs: 0 })).rejects.toThrow(
        WaitTimeout,
      );
      await held.release();
      const next = await locker.acquire('one-name', { ttlMs: 5_000, waitMs: 0 });
      await next.release();
    } finally {
      await locker.close();
      await running.stop();
    }
  });
});
