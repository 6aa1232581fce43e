/** A scheduled callback that can be cancelled. */
export interface Timer {
  cancel(): void;
  /**
   * Lets the process exit while this timer is pending (background chores; see
   * `backgroundTimer`). Only timers of the system clock have it.
   */
  unref?(): void;
}

/**
 * The one source of time in dlm. `now()` is monotonic milliseconds (never `Date.now()`), and
 * timers go through the clock too, so tests can jump or skew time and see the effect on
 * deadlines.
 */
export interface Clock {
  now(): number;
  setTimer(callback: () => void, delayMs: number): Timer;
}

/** A class, not two closures per timer: timers are set on hot paths. */
class SystemTimer implements Timer {
  constructor(private readonly handle: ReturnType<typeof setTimeout>) {}
  cancel(): void {
    clearTimeout(this.handle);
  }
  unref(): void {
    this.handle.unref();
  }
}

export const systemClock: Clock = {
  now: () => performance.now(),
  setTimer(callback, delayMs) {
    return new SystemTimer(setTimeout(callback, Math.max(0, delayMs)));
  },
};

export interface ManualClock extends Clock {
  /** Moves time forward, firing every timer that falls due, in deadline order. */
  advance(ms: number): void;
}

/** A clock that only moves when told to: for deterministic tests of deadlines. */
export function createManualClock(startMs = 0): ManualClock {
  let now = startMs;
  let seq = 0;
  const timers = new Map<number, { at: number; callback: () => void }>();
  return {
    now: () => now,
    setTimer(callback, delayMs) {
      const id = seq++;
      timers.set(id, { at: now + Math.max(0, delayMs), callback });
      return { cancel: () => timers.delete(id) };
    },
    advance(ms) {
      const target = now + ms;
      for (;;) {
        let nextId = -1;
        let nextAt = Number.POSITIVE_INFINITY;
        for (const [id, timer] of timers) {
          if (timer.at <= target && timer.at < nextAt) {
            nextAt = timer.at;
            nextId = id;
          }
        }
        if (nextId < 0) break;
        const timer = timers.get(nextId)!;
        timers.delete(nextId);
        now = Math.max(now, timer.at);
        timer.callback();
      }
      now = target;
    },
  };
}
