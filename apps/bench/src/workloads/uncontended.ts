import type { RunningTarget } from '../lockers/locker.js';
import { createSamples, type LatencySummary } from '../stats.js';

export interface UncontendedOptions {
  /** Sequential acquire+release pairs to time. */
  count: number;
  /** Untimed pairs first (at most a quarter of `maxMs`), so connection set-up and JIT warm-up are not in the figures. */
  warmup: number;
  /** The timed pairs stop after this long, whatever the count reached. */
  maxMs: number;
  ttlMs: number;
}

export interface UncontendedResult {
  acquire: LatencySummary;
  release: LatencySummary;
  errors: number;
  firstError?: string;
  durationMs: number;
}

/** Workload 1: one client, sequential acquire+release, each on a name not used before. */
export async function runUncontended(
  target: RunningTarget,
  prefix: string,
  options: UncontendedOptions,
): Promise<UncontendedResult> {
  const locker = await target.connect();
  const acquire = createSamples();
  const release = createSamples();
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  // The warm-up stops after `warmup` pairs or a quarter of the time budget, whichever comes
  // first: on etcd or ZooKeeper a pair takes milliseconds, and 2,000 of them would leave no time
  // for the timed ones. The timed pairs then get the whole budget.
  const warmupEnd = started + options.maxMs / 4;
  let deadline = Number.POSITIVE_INFINITY;
  let timedPairs = 0;
  try {
    for (let i = 0; ; i++) {
      const timed = i >= options.warmup || performance.now() >= warmupEnd;
      if (timed && deadline === Number.POSITIVE_INFINITY)
        deadline = performance.now() + options.maxMs;
      if (timed && (timedPairs >= options.count || performance.now() >= deadline)) break;
      const t0 = performance.now();
      try {
        const held = await locker.acquire(`${prefix}:u:${i}`, { ttlMs: options.ttlMs, waitMs: 0 });
        const t1 = performance.now();
        await held.release();
        const t2 = performance.now();
        if (timed) {
          timedPairs += 1;
          acquire.push(t1 - t0);
          release.push(t2 - t1);
        }
      } catch (error) {
        if (timed) timedPairs += 1;
        errors += 1;
        firstError ??= error instanceof Error ? error.message : String(error);
      }
    }
  } finally {
    await locker.close();
  }
  return {
    acquire: acquire.summary(),
    release: release.summary(),
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    durationMs: performance.now() - started,
  };
}
