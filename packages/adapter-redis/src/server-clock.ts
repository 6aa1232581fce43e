import type { Clock } from '@dlm/core';

/**
 * Tracks the Redis server's wall clock (as its `TIME` command and scripts see it) against our
 * monotonic clock, so that each write can carry a deadline *in the server's clock*: "do
 * nothing if you run after this". That is what stops a request whose caller already timed out
 * from taking effect later (the orphan lock).
 *
 * Every observation (server time `serverMs` read by a command that was answered at our
 * monotonic `receivedAt`) says the server's clock at `receivedAt` was at least `serverMs`, so
 * `serverMs - receivedAt` is a lower bound of the offset; we keep the largest. Deadlines built
 * on a lower bound fall early, never late: a late command is always refused, and a timely one
 * is refused only if the round trip that measured the offset was slow. No agreement between
 * the two machines' clocks is assumed. Because the rates of two clocks drift apart a little,
 * the bound is discounted by 1 ms per second of age and dropped after five minutes.
 */
export interface ServerClock {
  /** The server-clock deadline for a command sent now that may take `timeoutMs`; undefined when uncalibrated. */
  deadline(timeoutMs: number): number | undefined;
  /** Records that the server's clock read `serverMs` in a reply received at monotonic `receivedAt`. */
  observe(serverMs: number, receivedAt: number): void;
  /** Forgets everything (a new connection may reach a different server). */
  reset(): void;
}

const MAX_AGE_MS = 5 * 60_000;
const DRIFT_PER_MS = 0.001;

/**
 * `maxRoundTripMs`: the longest a reply we observe can have taken (the command time-out). An
 * observation lower than the current bound by more than that cannot be a slow reply: the
 * server's clock was set back, and the bound follows it (or late commands would pass).
 */
export function createServerClock(clock: Clock, maxRoundTripMs: number): ServerClock {
  let offset: number | undefined;
  let observedAt = 0;
  return {
    deadline(timeoutMs) {
      if (offset === undefined) return undefined;
      const now = clock.now();
      const age = now - observedAt;
      if (age > MAX_AGE_MS) {
        offset = undefined;
        return undefined;
      }
      return Math.floor(now + offset + timeoutMs - age * DRIFT_PER_MS);
    },
    observe(serverMs, receivedAt) {
      const candidate = serverMs - receivedAt;
      const now = clock.now();
      // A fresher bound replaces an older one once the older has aged by more than the
      // difference; otherwise the tighter (larger) one wins.
      const current = offset === undefined ? undefined : offset - (now - observedAt) * DRIFT_PER_MS;
      if (current === undefined || candidate >= current || candidate < current - maxRoundTripMs) {
        offset = candidate;
        observedAt = receivedAt;
      }
    },
    reset() {
      offset = undefined;
    },
  };
}
