import { type CpuPids, type CpuSnapshot, cpuPerOperation, cpuSnapshot } from '../cpu.js';
import type { Locker, RunningTarget } from '../lockers/locker.js';
import { createSamples, type LatencySummary } from '../stats.js';

export interface ThroughputOptions {
  clients: number;
  durationMs: number;
  /** Untimed run-in before the measured window (same loop, samples discarded). */
  warmupMs: number;
  ttlMs: number;
  /**
   * Workload 5: one connection (one `createClient`, one peer session) shared by all `clients`
   * callers, as a service with one client per process runs. Default: one each.
   */
  shared?: boolean;
}

export interface ThroughputResult {
  pairsPerSecond: number;
  pairs: number;
  pair: LatencySummary;
  acquire: LatencySummary;
  errors: number;
  firstError?: string;
  /** CPU µs per pair in the window: this process (clients), the dlm server, the services. */
  cpuUsPerPair: CpuSnapshot;
  durationMs: number;
}

/**
 * Workload 2: `clients` concurrent clients, each on its own lock, acquire+release in a loop.
 * Workload 5 (`shared`): the same callers over one client. Only pairs that start and finish
 * inside the measured window count.
 */
export async function runThroughput(
  target: RunningTarget,
  prefix: string,
  options: ThroughputOptions,
  pids: CpuPids = { backend: [] },
): Promise<ThroughputResult> {
  const lockers: Locker[] = options.shared
    ? [await target.connect()]
    : await Promise.all(Array.from({ length: options.clients }, () => target.connect()));
  const callers = Array.from({ length: options.clients }, (_, i) => lockers[i % lockers.length]!);
  const pair = createSamples();
  const acquire = createSamples();
  let errors = 0;
  let firstError: string | undefined;
  const windowStart = performance.now() + options.warmupMs;
  const windowEnd = windowStart + options.durationMs;
  // Taken by the first caller past each edge, not by timers: an in-process target (lib-embedded)
  // answers in microtasks, so its callers never yield to the timer queue inside the window.
  let cpuStart: CpuSnapshot | undefined;
  let cpuEnd: CpuSnapshot | undefined;
  const loop = async (locker: Locker, index: number) => {
    const name = `${prefix}:t:${index}`;
    for (;;) {
      const t0 = performance.now();
      if (t0 >= windowEnd) {
        cpuEnd ??= cpuSnapshot(pids);
        return;
      }
      if (t0 >= windowStart) cpuStart ??= cpuSnapshot(pids);
      try {
        const held = await locker.acquire(name, { ttlMs: options.ttlMs, waitMs: 0 });
        const t1 = performance.now();
        await held.release();
        const t2 = performance.now();
        if (t0 >= windowStart && t2 <= windowEnd) {
          pair.push(t2 - t0);
          acquire.push(t1 - t0);
        }
      } catch (error) {
        errors += 1;
        firstError ??= error instanceof Error ? error.message : String(error);
        // A failing target must not spin the CPU that the others' figures depend on.
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    }
  };
  try {
    await Promise.all(callers.map(loop));
  } finally {
    await Promise.all(lockers.map((locker) => locker.close().catch(() => {})));
  }
  const nan = { client: Number.NaN, server: Number.NaN, backend: Number.NaN };
  return {
    pairsPerSecond: pair.count / (options.durationMs / 1_000),
    pairs: pair.count,
    pair: pair.summary(),
    acquire: acquire.summary(),
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    cpuUsPerPair: cpuStart && cpuEnd ? cpuPerOperation(cpuStart, cpuEnd, pair.count) : nan,
    durationMs: options.durationMs,
  };
}
