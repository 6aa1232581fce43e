import type { RunningTarget } from '../lockers/locker.js';
import { createSamples, type LatencySummary } from '../stats.js';

export interface UncontendedOptions {
  /** Sequential acquire+release pairs to time. */
  count: number;
  /** Untimed pairs first, so connection set-up and JIT warm-up are not in the figures. */
  warmup: number;
  /** Stop early after this long, whatever the count reached. */
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
  const deadline = started + options.maxMs;
  try {
    for (let i = 0; i < options.warmup + options.count && performance.now() < deadline; i++) {
      const timed = i >= options.warmup;
      const t0 = performance.now();
      try {
        const held = await locker.acquire(`${prefix}:u:${i}`, { ttlMs: options.ttlMs, waitMs: 0 });
        const t1 = performance.now();
        await held.release();
        const t2 = performance.now();
        if (timed) {
          acquire.push(t1 - t0);
          release.push(t2 - t1);
        }
      } catch (error) {
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
