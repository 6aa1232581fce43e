import { type Clock, systemClock, type Timer } from './clock.js';
import type { DeadlineQueue } from './deadline-queue.js';
import { DlmError, isDlmError } from './errors.js';

/**
 * dlm's one home for waiting on time: a call bounded by a deadline, a sleep, a budget of time
 * shared by the steps of one operation, and background timers. Everything runs on a `Clock`,
 * so a test clock or a skewed one reaches every timer the code sets (the retry policy in
 * `retry.ts` is built on these too).
 */

/**
 * The longest delay a timer can take: Node fires a longer one at once (and warns), so delays
 * are capped here, and a bound of `Infinity` arms no timer at all.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** How `boundedCall` behaves; everything is optional. */
export interface BoundedCallOptions<T> {
  /** Default `systemClock`. */
  clock?: Clock;
  /**
   * Shares one timer among many calls in flight (core's deadline queue): a timer per call is a
   * measurable share of CPU on a hot path. The call's deadline is added to it; `clock` is then
   * not used.
   */
  deadlines?: DeadlineQueue;
  /**
   * The time-out error's text after `what: `. Default
   * `the backend did not answer in ${timeoutMs} ms`.
   */
  timeoutReason?: string;
  /** Mark the time-out error `indeterminate`: a write that may have run without our hearing. */
  indeterminate?: boolean;
  /**
   * Builds the error the call rejects with at its deadline instead of the UNAVAILABLE one
   * (for a caller that classifies time-outs itself, or must do something when one happens).
   */
  timeoutError?: () => unknown;
  /**
   * Maps the call's own rejection (into UNAVAILABLE in the caller's words, say). Not applied to
   * the time-out or abort errors.
   */
  mapError?: (error: unknown) => unknown;
  /** Stops waiting early: rejects with CANCELLED (the signal's reason if it is a DlmError). */
  signal?: AbortSignal;
  /**
   * Called with a result that arrived after the caller was told UNAVAILABLE or CANCELLED: a
   * grant nobody will use can be given back.
   */
  onLateResult?: (value: T) => void;
}

/**
 * Runs `call` and rejects if it has not settled within `timeoutMs`: by default with
 * UNAVAILABLE `${what}: the backend did not answer in ${timeoutMs} ms`. The timer is cancelled
 * as soon as the call settles (or the signal aborts), so nothing of a finished call stays
 * scheduled. The call itself is not cancelled — it may already be on the wire — but it is told
 * through `abandoned()` that nobody waits for it any more; callers make its late effect
 * harmless (`onLateResult`, a server-side deadline). `timeoutMs` of `Infinity` sets no timer.
 *
 * @example
 * const state = await boundedCall('inspect', 2_000, () => backend.inspect(name), { clock });
 */
export function boundedCall<T>(
  what: string,
  timeoutMs: number,
  call: (abandoned: () => boolean) => Promise<T>,
  options: BoundedCallOptions<T> = {},
): Promise<T> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(cancelledBy(signal, what));
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let cancelTimer: (() => void) | undefined;
    const stop = () => {
      settled = true;
      cancelTimer?.();
      if (signal) signal.removeEventListener('abort', onAbort);
    };
    const onTimeout = () => {
      if (settled) return;
      stop();
      reject(
        options.timeoutError ? options.timeoutError() : timeoutError(what, timeoutMs, options),
      );
    };
    function onAbort(): void {
      if (settled) return;
      stop();
      reject(cancelledBy(signal!, what));
    }
    if (Number.isFinite(timeoutMs)) {
      if (options.deadlines) cancelTimer = options.deadlines.add(onTimeout, timeoutMs);
      else {
        const timer = (options.clock ?? systemClock).setTimer(
          onTimeout,
          Math.min(timeoutMs, MAX_TIMER_MS),
        );
        cancelTimer = () => timer.cancel();
      }
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    let pending: Promise<T>;
    try {
      pending = call(() => settled);
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => {
        if (settled) {
          options.onLateResult?.(value);
          return;
        }
        stop();
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        stop();
        reject(options.mapError ? options.mapError(error) : error);
      },
    );
  });
}

function timeoutError(
  what: string,
  timeoutMs: number,
  options: Pick<BoundedCallOptions<unknown>, 'timeoutReason' | 'indeterminate'>,
): DlmError {
  const reason = options.timeoutReason ?? `the backend did not answer in ${timeoutMs} ms`;
  return new DlmError(
    'UNAVAILABLE',
    `${what}: ${reason}`,
    options.indeterminate ? { indeterminate: true } : {},
  );
}

function cancelledBy(signal: AbortSignal, what: string): DlmError {
  const reason: unknown = signal.reason;
  if (isDlmError(reason)) return reason;
  return new DlmError('CANCELLED', `${what} was cancelled`, { cause: reason });
}

/**
 * Waits for `promise` up to `ms`: true when it fulfilled in time, false when it failed or the
 * time ran out. For waits whose failure is not an error (a close that should not hang on a dead
 * peer, a subscription given a moment to be ready). The timer is cancelled when it settles.
 */
export function settlesWithin(
  clock: Clock,
  promise: Promise<unknown>,
  ms: number,
): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = clock.setTimer(() => resolve(false), Math.min(ms, MAX_TIMER_MS));
    promise.then(
      () => {
        timer.cancel();
        resolve(true);
      },
      () => {
        timer.cancel();
        resolve(false);
      },
    );
  });
}

/**
 * Resolves after `ms` on `clock`. An abort of `signal` ends the wait early, and an already
 * aborted one at once; it resolves all the same (never rejects), and the caller looks at the
 * signal to tell why it woke.
 *
 * @example
 * await sleep(clock, backoffMs, signal);
 * if (signal.aborted) throw cancelled();
 */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    let timer: Timer | undefined;
    const done = () => {
      timer?.cancel();
      signal?.removeEventListener('abort', done);
      resolve();
    };
    signal?.addEventListener('abort', done, { once: true });
    timer = clock.setTimer(done, Math.min(ms, MAX_TIMER_MS));
  });
}

/**
 * A budget of time shared by every step of one operation (an acquire that reads, then writes,
 * then reads again): each step is bounded by what is left, so the whole keeps the operation's
 * bound. `what` names the operation in the errors its steps give.
 */
export interface Budget {
  readonly what: string;
  /** Milliseconds left before the deadline; ≤ 0 once it has passed. */
  remainingMs(): number;
  /**
   * The clock the budget counts on: the steps set their timers (time-outs, sleeps between
   * retries) on it, so a test clock given to whoever made the budget reaches every one of them.
   */
  readonly clock: Clock;
}

/**
 * A budget of `totalMs` from now on `clock`.
 *
 * @example
 * const limit = budget('acquire', commandTimeoutMs, clock);
 * await boundedCall(limit.what, Math.max(0, limit.remainingMs()), step, { clock: limit.clock });
 */
export function budget(what: string, totalMs: number, clock: Clock = systemClock): Budget {
  const deadline = clock.now() + totalMs;
  return { what, clock, remainingMs: () => deadline - clock.now() };
}

/**
 * A timer for background chores (a periodic sweep, a reconnect watchdog, a retried clean-up)
 * that must not keep the process alive by itself: on the system clock it is unref'd, as a raw
 * `setTimeout(...).unref()` was. A test clock has nothing to unref.
 */
export function backgroundTimer(clock: Clock, callback: () => void, delayMs: number): Timer {
  const timer = clock.setTimer(callback, Math.min(delayMs, MAX_TIMER_MS));
  timer.unref?.();
  return timer;
}
