import type { AcquireOptions, Held, RunningTarget, SharedWorkload } from '../lockers/locker.js';
import { createSamples, type LatencySummary } from '../stats.js';
import { loopOnOneLock, type OneLockOptions } from './one-lock.js';

export type SharedModesOptions = OneLockOptions;

export interface SharedModesResult {
  workload: SharedWorkload;
  /** Grants per second, both modes. */
  grantsPerSecond: number;
  grants: number;
  /** From the acquire call to the grant, every grant. */
  acquire: LatencySummary;
  /** Read-write: per mode (shared = reads, exclusive = writes). */
  reads?: { grants: number; acquire: LatencySummary };
  writes?: { grants: number; acquire: LatencySummary };
  /** The most holders at once that were seen (a semaphore at its limit shows the limit). */
  maxHolders: number;
  /** Grants beyond the limit, or a writer beside anyone, or a reader beside a writer (must be 0). */
  violations: number;
  timeouts: number;
  errors: number;
  firstError?: string;
  durationMs: number;
}

/** Workload 6's semaphore and workload 7's read mix. */
export const SEMAPHORE_LIMIT = 4;
export const READ_FRACTION = 0.9;

/**
 * Whether a started dlm target grants shared modes end to end (its backend declares
 * `sharedModes`, and server and client carry `mode`): two clients each take a shared lease of
 * limit 2 on one name with no wait. Null when both are granted, else why not: the first is
 * refused (INVALID_PARAMS) where the backend has no shared modes; the second is refused where
 * a client drops `mode` (it asked for two exclusive leases).
 */
export async function probeSharedModes(
  target: RunningTarget,
  name: string,
): Promise<string | null> {
  const lockers = await Promise.all([target.connect(), target.connect()]);
  const held: Held[] = [];
  try {
    for (const locker of lockers) {
      held.push(await locker.acquire(name, { ttlMs: 5_000, waitMs: 0, mode: 'shared', limit: 2 }));
    }
    return null;
  } catch (error) {
    return held.length === 0
      ? `a shared acquire was refused (the backend does not declare sharedModes): ${error instanceof Error ? error.message : String(error)}`
      : 'a second shared holder was refused (does the client pass mode?)';
  } finally {
    await Promise.allSettled(held.map((h) => h.release()));
    await Promise.allSettled(lockers.map((locker) => locker.close()));
  }
}

/**
 * Workload 6 (`semaphore`): `clients` clients loop on ONE semaphore of `SEMAPHORE_LIMIT`
 * permits: acquire a permit with a wait, hold briefly, release. Workload 7 (`read-write`): the
 * same on ONE read-write lock, each acquire a read (shared) with `READ_FRACTION`, else a write
 * (exclusive). All clients live in this process, so counters of current holders check the
 * modes exactly, as workload 3 checks mutual exclusion: up on a grant, down before the release
 * is sent.
 */
export async function runSharedModes(
  target: RunningTarget,
  prefix: string,
  workload: SharedWorkload,
  options: SharedModesOptions,
): Promise<SharedModesResult> {
  const name = `${prefix}:${workload === 'semaphore' ? 'sem' : 'rw'}`;
  const all = createSamples();
  const readSamples = createSamples();
  const writeSamples = createSamples();
  let readers = 0;
  let writers = 0;
  let maxHolders = 0;
  let violations = 0;
  const base = { ttlMs: options.ttlMs, waitMs: options.waitMs };
  const limit = workload === 'semaphore' ? SEMAPHORE_LIMIT : Number.POSITIVE_INFINITY;

  const counts = await loopOnOneLock(target, name, options, () => {
    const write = workload === 'read-write' && Math.random() >= READ_FRACTION;
    const request: AcquireOptions = write
      ? base
      : workload === 'semaphore'
        ? { ...base, mode: 'shared', limit: SEMAPHORE_LIMIT }
        : { ...base, mode: 'shared' };
    return {
      request,
      granted({ waitedMs, inWindow }) {
        if (write) writers += 1;
        else readers += 1;
        maxHolders = Math.max(maxHolders, readers + writers);
        if (writers > 1 || (writers > 0 && readers > 0) || readers > limit) violations += 1;
        if (inWindow) {
          all.push(waitedMs);
          (write ? writeSamples : readSamples).push(waitedMs);
        }
      },
      releasing() {
        if (write) writers -= 1;
        else readers -= 1;
      },
    };
  });
  const seconds = options.durationMs / 1_000;
  return {
    workload,
    grantsPerSecond: all.count / seconds,
    grants: all.count,
    acquire: all.summary(),
    ...(workload === 'read-write'
      ? {
          reads: { grants: readSamples.count, acquire: readSamples.summary() },
          writes: { grants: writeSamples.count, acquire: writeSamples.summary() },
        }
      : {}),
    maxHolders,
    violations,
    timeouts: counts.timeouts,
    errors: counts.errors,
    ...(counts.firstError === undefined ? {} : { firstError: counts.firstError }),
    durationMs: options.durationMs,
  };
}
