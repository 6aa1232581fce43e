import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { LockBackend } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { embeddedBackend } from '../src/index.js';

// A forced GC before each heap reading, so the figure is live memory, not garbage that a
// later collection would free.
setFlagsFromString('--expose_gc');
const gc = runInNewContext('gc') as () => void;

const heapUsed = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

/** Median and p99 of the per-acquire time, in µs, measured over chunks of 100 acquires. */
async function acquireLatency(backend: LockBackend, label: string) {
  const perAcquireUs: number[] = [];
  // The first 30 chunks warm the JIT up and are not counted.
  for (let chunk = 0; chunk < 330; chunk++) {
    const started = performance.now();
    for (let i = 0; i < 100; i++) {
      await backend.tryAcquire({ name: `${label}/${chunk}/${i}`, owner: 'probe', ttlMs: 600_000 });
    }
    if (chunk >= 30) perAcquireUs.push(((performance.now() - started) * 1000) / 100);
  }
  perAcquireUs.sort((a, b) => a - b);
  return {
    p50: perAcquireUs[Math.floor(perAcquireUs.length * 0.5)]!,
    p99: perAcquireUs[Math.floor(perAcquireUs.length * 0.99)]!,
  };
}

describe('embedded backend at scale (in memory)', () => {
  it('holds 100,000 locks in well under 2 KiB each, with acquire time independent of the count', async () => {
    // The small case first, on a clean heap, so it does not pay for collecting the big one.
    const small = await embeddedBackend();
    for (let i = 0; i < 1_000; i++) {
      await small.tryAcquire({ name: `small/${i}`, owner: `session-${i}`, ttlMs: 600_000 + i });
    }
    const atSmall = await acquireLatency(small, 'at-1k');
    await small.close();

    const before = heapUsed();
    const backend = await embeddedBackend();
    // Names and owners like a server's: per-tenant paths, 10,000 distinct session owners.
    for (let i = 0; i < 100_000; i++) {
      await backend.tryAcquire({
        name: `tenant-${i % 100}/resource/${i}`,
        owner: `session-${i % 10_000}`,
        ttlMs: 600_000 + (i % 1000),
      });
    }
    const bytesPerLock = (heapUsed() - before) / 100_000;
    expect((await backend.list!('tenant-7/')).length).toBe(1_000);

    const atScale = await acquireLatency(backend, 'at-100k');
    await backend.close();

    console.log(
      `100,000 held locks: ${bytesPerLock.toFixed(0)} bytes of heap per lock; acquire (µs, per ` +
        `100-acquire chunk) at 1k held p50 ${atSmall.p50.toFixed(2)} p99 ${atSmall.p99.toFixed(2)}, ` +
        `at 100k held p50 ${atScale.p50.toFixed(2)} p99 ${atScale.p99.toFixed(2)}`,
    );
    expect(bytesPerLock).toBeLessThan(2048);
    // Loose on purpose (a shared CI machine is noisy); what it catches is work that grows with
    // the number of held locks, which would be ~100x here.
    expect(atScale.p50).toBeLessThan(3 * atSmall.p50 + 1);
  });

  it('holds 100,000 shared holders (20,000 names of 5) in well under 2 KiB each', async () => {
    const before = heapUsed();
    const backend = await embeddedBackend();
    for (let i = 0; i < 100_000; i++) {
      const result = await backend.tryAcquire({
        name: `tenant-${i % 100}/semaphore/${i % 20_000}`,
        owner: `session-${i % 10_000}`,
        ttlMs: 600_000 + (i % 1000),
        keyHash: `key-${i}`,
        mode: 'shared',
        limit: 5,
      });
      expect(result.granted).toBe(true);
    }
    const bytesPerHolder = (heapUsed() - before) / 100_000;
    const state = await backend.inspect('tenant-7/semaphore/7');
    expect(state?.holders).toHaveLength(5);
    await backend.close();
    console.log(
      `100,000 shared holders on 20,000 names: ${bytesPerHolder.toFixed(0)} bytes of heap per holder`,
    );
    expect(bytesPerHolder).toBeLessThan(2048);
  });
});
