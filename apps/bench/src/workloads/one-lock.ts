import {
  type AcquireOptions,
  type Held,
  type Locker,
  type RunningTarget,
  WaitTimeout,
} from '../lockers/locker.js';

/** Workloads 3, 6 and 7: clients in this process loop on ONE lock for a timed window. */
export interface OneLockOptions {
  clients: number;
  durationMs: number;
  warmupMs: number;
  /** How long a holder keeps the lock; 0 = until the next event-loop turn (setImmediate). */
  holdMs: number;
  /** How long one acquire may wait before it gives up (and the client tries again). */
  waitMs: number;
  ttlMs: number;
}

const hold = (ms: number) =>
  new Promise<void>((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)));

/** A grant, as a turn is told of it. */
export interface Grant {
  /** `performance.now()` at the grant. */
  at: number;
  /** From the acquire call to the grant. */
  waitedMs: number;
  /** Whether the grant falls in the measured window (after the warm-up, before the end). */
  inWindow: boolean;
}

/** One acquire of a client's loop: what it asks for, and its bookkeeping around the hold. */
export interface Turn {
  request: AcquireOptions;
  /** Right after the grant, before the hold. */
  granted(grant: Grant): void;
  /** After the hold, before the release is sent (after that, another may be granted). */
  releasing(): void;
}

export interface OneLockCounts {
  /** Acquires whose wait ran out. */
  timeouts: number;
  errors: number;
  firstError?: string;
}

/**
 * Connects `options.clients` clients and has each loop on `name` until the window ends:
 * acquire with its next `turn(index)`'s request, hold `holdMs`, release. An acquire whose wait
 * ran out is retried at once; one that failed otherwise, after 1 ms.
 */
export async function loopOnOneLock(
  target: RunningTarget,
  name: string,
  options: OneLockOptions,
  turn: (index: number) => Turn,
): Promise<OneLockCounts> {
  const lockers: Locker[] = await Promise.all(
    Array.from({ length: options.clients }, () => target.connect()),
  );
  const counts: OneLockCounts = { timeouts: 0, errors: 0 };
  const noteError = (error: unknown) => {
    counts.errors += 1;
    counts.firstError ??= error instanceof Error ? error.message : String(error);
  };
  const windowStart = performance.now() + options.warmupMs;
  const windowEnd = windowStart + options.durationMs;

  const loop = async (locker: Locker, index: number) => {
    while (performance.now() < windowEnd) {
      const next = turn(index);
      const asked = performance.now();
      let held: Held;
      try {
        held = await locker.acquire(name, next.request);
      } catch (error) {
        if (error instanceof WaitTimeout) counts.timeouts += 1;
        else {
          noteError(error);
          await hold(1);
        }
        continue;
      }
      const at = performance.now();
      next.granted({ at, waitedMs: at - asked, inWindow: at >= windowStart && at <= windowEnd });
      await hold(options.holdMs);
      next.releasing();
      try {
        await held.release();
      } catch (error) {
        noteError(error);
      }
    }
  };
  try {
    await Promise.all(lockers.map(loop));
  } finally {
    await Promise.all(lockers.map((locker) => locker.close().catch(() => {})));
  }
  return counts;
}
