import type { Clock, Timer } from '@dlm/core';

/**
 * A `Clock` (core's) whose time can jump forward, stand still or run at another rate, with
 * timers that follow: a timer due at virtual time T fires when `now()` reaches T, however the
 * clock got there. The dlm server runs on one of these in the fault harness, so a jump or a
 * skew reaches everything in that process that measures time through the clock (core's
 * deadlines and lease checks, and the adapters that take a clock).
 */
export interface SkewClock extends Clock {
  /** Moves the clock forward by `ms` at once; timers that fall due fire. */
  jump(ms: number): void;
  /** From now on the clock advances `rate` ms per real ms (0 stops it, 2 runs twice as fast). */
  setRate(rate: number): void;
  readonly rate: number;
  /** How far the clock is ahead of the real monotonic clock (negative: behind). */
  readonly offsetMs: number;
}

interface PendingTimer {
  at: number;
  callback: () => void;
  handle: ReturnType<typeof setTimeout> | undefined;
}

export function createSkewClock(real: () => number = () => performance.now()): SkewClock {
  let anchorReal = real();
  let anchorVirtual = anchorReal;
  let rate = 1;
  const timers = new Set<PendingTimer>();

  const now = () => anchorVirtual + (real() - anchorReal) * rate;

  function arm(timer: PendingTimer): void {
    if (timer.handle !== undefined) clearTimeout(timer.handle);
    timer.handle = undefined;
    if (rate === 0) return; // a stopped clock fires nothing until it moves again
    const remaining = timer.at - now();
    timer.handle = setTimeout(() => fire(timer), Math.max(0, remaining / rate));
  }

  function fire(timer: PendingTimer): void {
    timer.handle = undefined;
    if (!timers.has(timer)) return;
    // Real timers may fire a little early relative to a float virtual deadline: re-arm then.
    if (now() + 0.5 < timer.at) {
      arm(timer);
      return;
    }
    timers.delete(timer);
    timer.callback();
  }

  function reanchor(): void {
    anchorVirtual = now();
    anchorReal = real();
  }

  return {
    now,
    setTimer(callback, delayMs): Timer {
      const timer: PendingTimer = { at: now() + Math.max(0, delayMs), callback, handle: undefined };
      timers.add(timer);
      arm(timer);
      return {
        cancel() {
          timers.delete(timer);
          if (timer.handle !== undefined) clearTimeout(timer.handle);
        },
      };
    },
    jump(ms) {
      if (!(ms >= 0)) throw new RangeError('a monotonic clock only jumps forward');
      reanchor();
      anchorVirtual += ms;
      for (const timer of timers) arm(timer);
    },
    setRate(next) {
      if (!(next >= 0) || !Number.isFinite(next)) throw new RangeError('rate must be ≥ 0');
      reanchor();
      rate = next;
      for (const timer of timers) arm(timer);
    },
    get rate() {
      return rate;
    },
    get offsetMs() {
      return now() - real();
    },
  };
}
