import type { RunningTarget } from '../lockers/locker.js';
import { createSamples, fairness, type LatencySummary } from '../stats.js';
import { loopOnOneLock, type OneLockOptions } from './one-lock.js';

export type ContentionOptions = OneLockOptions;

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
  const grantsPerClient = new Array<number>(options.clients).fill(0);
  const handoff = createSamples();
  let holders = 0;
  let violations = 0;
  let handoffs = 0;
  let lastHolder = -1;
  let lastReleaseAt = 0;
  const request = { ttlMs: options.ttlMs, waitMs: options.waitMs };
  const counts = await loopOnOneLock(target, `${prefix}:c`, options, (index) => ({
    request,
    granted({ at, inWindow }) {
      holders += 1;
      if (holders > 1) violations += 1;
      if (inWindow) {
        grantsPerClient[index]! += 1;
        if (lastHolder !== -1 && lastHolder !== index) {
          handoffs += 1;
          handoff.push(at - lastReleaseAt);
        }
      }
    },
    releasing() {
      holders -= 1;
      lastHolder = index;
      lastReleaseAt = performance.now();
    },
  }));
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
    timeouts: counts.timeouts,
    errors: counts.errors,
    ...(counts.firstError === undefined ? {} : { firstError: counts.firstError }),
    durationMs: options.durationMs,
  };
}
