import { describe, expect, it } from 'vitest';
import { type Clock, createManualClock, type Timer } from '../src/clock.js';
import { createDeadlineQueue } from '../src/deadline-queue.js';
import { DlmError, isDlmError } from '../src/errors.js';
import {
  backgroundTimer,
  boundedCall,
  budget,
  MAX_TIMER_MS,
  settlesWithin,
  sleep,
} from '../src/time.js';

const flush = () => new Promise((resolve) => setImmediate(resolve));

/** Moves a manual clock on, then lets what its fired timers started settle. */
async function advance(clock: { advance(ms: number): void }, ms: number): Promise<void> {
  clock.advance(ms);
  await flush();
}

/** A manual clock that counts the timers pending on it (set and not yet fired or cancelled). */
function countingClock() {
  const inner = createManualClock();
  let pending = 0;
  const delays: number[] = [];
  const clock: Clock & { advance(ms: number): void; pending(): number; delays: number[] } = {
    now: inner.now,
    advance: inner.advance,
    delays,
    pending: () => pending,
    setTimer(callback, delayMs): Timer {
      pending++;
      delays.push(delayMs);
      let live = true;
      const timer = inner.setTimer(() => {
        live = false;
        pending--;
        callback();
      }, delayMs);
      return {
        cancel() {
          if (live) pending--;
          live = false;
          timer.cancel();
        },
      };
    },
  };
  return clock;
}

/** A promise with its resolve and reject in hand. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** What a promise has done so far, without awaiting it. */
function track<T>(promise: Promise<T>) {
  const state: { status: 'pending' | 'fulfilled' | 'rejected'; value?: T; error?: unknown } = {
    status: 'pending',
  };
  promise.then(
    (value) => {
      state.status = 'fulfilled';
      state.value = value;
    },
    (error: unknown) => {
      state.status = 'rejected';
      state.error = error;
    },
  );
  return state;
}

describe('boundedCall', () => {
  it('rejects UNAVAILABLE naming the call and its bound in ms when the deadline passes', async () => {
    const clock = countingClock();
    const call = deferred<string>();
    const result = track(boundedCall('inspect', 500, () => call.promise, { clock }));
    await advance(clock, 499);
    expect(result.status).toBe('pending');
    await advance(clock, 1);
    expect(result.status).toBe('rejected');
    expect(isDlmError(result.error, 'UNAVAILABLE')).toBe(true);
    expect((result.error as DlmError).message).toBe(
      'inspect: the backend did not answer in 500 ms',
    );
    expect((result.error as DlmError).details.indeterminate).toBeUndefined();
  });

  it('marks the time-out indeterminate and words it as told', async () => {
    const clock = countingClock();
    const result = track(
      boundedCall('acquire', 100, () => new Promise<never>(() => {}), {
        clock,
        indeterminate: true,
        timeoutReason: 'Redis did not answer within 100 ms',
      }),
    );
    await advance(clock, 100);
    const error = result.error as DlmError;
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toBe('acquire: Redis did not answer within 100 ms');
    expect(error.details.indeterminate).toBe(true);
  });

  it('settling before the deadline cancels the timer and keeps the value', async () => {
    const clock = countingClock();
    const call = deferred<string>();
    const result = track(boundedCall('inspect', 500, () => call.promise, { clock }));
    expect(clock.pending()).toBe(1);
    call.resolve('state');
    await flush();
    expect(result).toMatchObject({ status: 'fulfilled', value: 'state' });
    expect(clock.pending()).toBe(0);
    await advance(clock, 1_000);
    expect(result.status).toBe('fulfilled');
  });

  it('a rejection before the deadline cancels the timer and passes through (or mapped)', async () => {
    const clock = countingClock();
    const boom = new Error('boom');
    const plain = track(boundedCall('x', 500, () => Promise.reject(boom), { clock }));
    const mapped = track(
      boundedCall('x', 500, () => Promise.reject(boom), {
        clock,
        mapError: (error) => new DlmError('UNAVAILABLE', `x: ${(error as Error).message}`),
      }),
    );
    const thrown = track(
      boundedCall(
        'x',
        500,
        () => {
          throw boom;
        },
        { clock },
      ),
    );
    await flush();
    expect(plain.error).toBe(boom);
    expect(thrown.error).toBe(boom);
    expect((mapped.error as DlmError).message).toBe('x: boom');
    expect(clock.pending()).toBe(0);
  });

  it('tells the call it was abandoned, and hands a late result to onLateResult', async () => {
    const clock = countingClock();
    const call = deferred<string>();
    let abandoned: (() => boolean) | undefined;
    const late: string[] = [];
    const result = track(
      boundedCall(
        'acquire',
        50,
        (isAbandoned) => {
          abandoned = isAbandoned;
          return call.promise;
        },
        { clock, onLateResult: (value) => late.push(value) },
      ),
    );
    expect(abandoned!()).toBe(false);
    await advance(clock, 50);
    expect(result.status).toBe('rejected');
    expect(abandoned!()).toBe(true);
    call.resolve('grant');
    await flush();
    expect(late).toEqual(['grant']);
  });

  it('an abort rejects CANCELLED at once and cancels the timer', async () => {
    const clock = countingClock();
    const controller = new AbortController();
    const result = track(
      boundedCall('acquire', 500, () => new Promise<never>(() => {}), {
        clock,
        signal: controller.signal,
      }),
    );
    controller.abort();
    await flush();
    expect(isDlmError(result.error, 'CANCELLED')).toBe(true);
    expect((result.error as DlmError).message).toBe('acquire was cancelled');
    expect(clock.pending()).toBe(0);
  });

  it("an abort whose reason is a DlmError rejects with that reason; an aborted signal doesn't call", async () => {
    const clock = countingClock();
    const reason = new DlmError('CANCELLED', 'the session closed');
    const controller = new AbortController();
    controller.abort(reason);
    let called = false;
    const result = track(
      boundedCall(
        'acquire',
        500,
        async () => {
          called = true;
        },
        { clock, signal: controller.signal },
      ),
    );
    await flush();
    expect(result.error).toBe(reason);
    expect(called).toBe(false);
    expect(clock.pending()).toBe(0);
  });

  it('a settled call leaves no listener on its signal', async () => {
    const clock = countingClock();
    const { signal } = new AbortController();
    let listeners = 0;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      listeners++;
      add(...args);
    }) as typeof add;
    signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
      listeners--;
      remove(...args);
    }) as typeof remove;
    await boundedCall('x', 500, async () => 1, { clock, signal });
    await boundedCall('x', 500, () => Promise.reject(new Error('no')), { clock, signal }).catch(
      () => {},
    );
    expect(listeners).toBe(0);
  });

  it('timeoutError replaces the time-out error', async () => {
    const clock = countingClock();
    const result = track(
      boundedCall('x', 10, () => new Promise<never>(() => {}), {
        clock,
        timeoutError: () => new Error('deadline exceeded (client side)'),
      }),
    );
    await advance(clock, 10);
    expect((result.error as Error).message).toBe('deadline exceeded (client side)');
    expect(isDlmError(result.error)).toBe(false);
  });

  it('shares a deadline queue when given one, and takes its timer back on settle', async () => {
    const clock = countingClock();
    const deadlines = createDeadlineQueue(clock, 200);
    const first = deferred<number>();
    const a = track(boundedCall('a', 200, () => first.promise, { deadlines }));
    const b = track(boundedCall('b', 200, () => new Promise<never>(() => {}), { deadlines }));
    expect(clock.pending()).toBe(1);
    first.resolve(1);
    await flush();
    expect(a.status).toBe('fulfilled');
    await advance(clock, 200);
    expect((b.error as DlmError).message).toBe('b: the backend did not answer in 200 ms');
    expect(clock.pending()).toBe(0);
  });

  it('an infinite bound sets no timer; a huge one is capped to what a timer can take', async () => {
    const clock = countingClock();
    const call = deferred<number>();
    const endless = track(
      boundedCall('x', Number.POSITIVE_INFINITY, () => call.promise, { clock }),
    );
    expect(clock.pending()).toBe(0);
    void boundedCall('y', 10 * MAX_TIMER_MS, () => new Promise<never>(() => {}), { clock });
    expect(clock.delays).toEqual([MAX_TIMER_MS]);
    call.resolve(7);
    await flush();
    expect(endless.value).toBe(7);
  });
});

describe('sleep', () => {
  it('resolves after the delay on the given clock, not before', async () => {
    const clock = countingClock();
    const slept = track(sleep(clock, 100));
    await advance(clock, 99);
    expect(slept.status).toBe('pending');
    await advance(clock, 1);
    expect(slept.status).toBe('fulfilled');
  });

  it('an abort wakes it early and cancels its timer; an aborted signal does not wait', async () => {
    const clock = countingClock();
    const controller = new AbortController();
    const slept = track(sleep(clock, 10_000, controller.signal));
    controller.abort();
    await flush();
    expect(slept.status).toBe('fulfilled');
    expect(clock.pending()).toBe(0);
    const again = track(sleep(clock, 10_000, controller.signal));
    await flush();
    expect(again.status).toBe('fulfilled');
    expect(clock.pending()).toBe(0);
  });
});

describe('budget', () => {
  it('counts down on its clock and goes to zero and below at the deadline', () => {
    const clock = createManualClock(1_000);
    const limit = budget('acquire', 300, clock);
    expect(limit.what).toBe('acquire');
    expect(limit.clock).toBe(clock);
    expect(limit.remainingMs()).toBe(300);
    clock.advance(200);
    expect(limit.remainingMs()).toBe(100);
    clock.advance(150);
    expect(limit.remainingMs()).toBe(-50);
  });
});

describe('settlesWithin', () => {
  it('true when the promise fulfils in time, false on failure or time-out; no timer left', async () => {
    const clock = countingClock();
    const soon = deferred<void>();
    const ok = track(settlesWithin(clock, soon.promise, 100));
    const failed = track(settlesWithin(clock, Promise.reject(new Error('x')), 100));
    const never = track(settlesWithin(clock, new Promise(() => {}), 100));
    soon.resolve();
    await flush();
    expect(ok.value).toBe(true);
    expect(failed.value).toBe(false);
    expect(clock.pending()).toBe(1);
    await advance(clock, 100);
    expect(never.value).toBe(false);
    expect(clock.pending()).toBe(0);
  });
});

describe('backgroundTimer', () => {
  it('runs on the given clock and can be cancelled', () => {
    const clock = createManualClock();
    let fired = 0;
    backgroundTimer(clock, () => fired++, 50);
    const cancelled = backgroundTimer(clock, () => fired++, 50);
    cancelled.cancel();
    clock.advance(50);
    expect(fired).toBe(1);
  });
});
