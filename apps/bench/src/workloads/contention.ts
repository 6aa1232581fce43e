import { type Held, type Locker, type RunningTarget, WaitTimeout } from '../lockers/locker.js';
import { createSamples, fairness, type LatencySummary } from '../stats.js';

export interface ContentionOptions {
  clients: number;
  durationMs: number;
  warmupMs: number;
  /** How long a holder keeps the lock; 0 = until the next event-loop turn (setImmediate). */
  holdMs: number;
  /** How long one acquire may wait before it gives up (and the client tries again). */
  waitMs: number;
  ttlMs: number;
}

export interface ContentionResult {
  grantsPerSecond: number;
  /** Grants to a different client than the previous holder, per second. */
  handoffsPerSecond: number;
  grants: number;
  handoffs: number;
  /** From the previous holder starting its release to the next holder's grant. */
  handoff: LatencySummary;
  /** The smallest client's share of grants ÷ an equal share. */
  fairness: number;
  grantsPerClient: number[];
  /** Grants while another client still held the lock (must be 0). */
  violations: number;
  /** Acquires whose wait ran out. */
  timeouts: number;
  errors: number;
  firstError?: string;
  durationMs: number;
}

const hold = (ms: number) =>
  new Promise<void>((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)));

/**
 * Workload 3: `clients` clients loop on ONE lock: acquire with a wait, hold briefly, release.
 * All clients live in this process, so one counter of current holders checks mutual exclusion
 * exactly: it goes up on a grant and down before the release is sent (after that, another
 * client may legitimately be granted the lock before our release's reply arrives).
 */
export async function runContention(
  target: RunningTarget,
  prefix: string,
  options: ContentionOptions,
): Promise<ContentionResult> {
  const name = `${prefix}:c`;
  const lockers: Locker[] = await Promise.all(
    Array.from({ length: options.clients }, () => target.connect()),
  );
  const grantsPerClient = new Array<number>(options.clients).fill(0);
  const handoff = createSamples();
  let holders = 0;
  let violations = 0;
  let timeouts = 0;
  let errors = 0;
  let firstError: string | undefined;
  const noteError = (error: unknown) => {
    errors += 1;
    firstError ??= error instanceof Error ? error.message : String(error);
  };
  let handoffs = 0;
  let lastHolder = -1;
  let lastReleaseAt = 0;
  const windowStart = performance.now() + options.warmupMs;
  const windowEnd = windowStart + options.durationMs;

  const loop = async (locker: Locker, index: number) => {
    while (performance.now() < windowEnd) {
      let held: Held;
      try {
        held = await locker.acquire(name, { ttlMs: options.ttlMs, waitMs: options.waitMs });
      } catch (error) {
        if (error instanceof WaitTimeout) timeouts += 1;
        else {
          noteError(error);
          await hold(1);
        }
        continue;
      }
      const grantAt = performance.now();
      holders += 1;
      if (holders > 1) violations += 1;
      if (grantAt >= windowStart && grantAt <= windowEnd) {
        grantsPerClient[index]! += 1;
        if (lastHolder !== -1 && lastHolder !== index) {
          handoffs += 1;
          handoff.push(grantAt - lastReleaseAt);
        }
      }
      await hold(options.holdMs);
      holders -= 1;
      lastHolder = index;
      lastReleaseAt = performance.now();
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
  const grants = grantsPerClient.reduce((sum, count) => sum + count, 0);
  const seconds = options.durationMs / 1_000;
  return {
    grantsPerSecond: grants / seconds,
    handoffsPerSecond: handoffs / seconds,
    grants,
    handoffs,
    handoff: handoff.summary(),
    fairness: fairness(grantsPerClient),
    grantsPerClient,
    violations,
    timeouts,
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    durationMs: options.durationMs,
  };
}
