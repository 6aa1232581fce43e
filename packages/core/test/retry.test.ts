import { describe, expect, it } from 'vitest';
import { createManualClock, type ManualClock } from '../src/clock.js';
import { DlmError, isDlmError } from '../src/errors.js';
import {
  backoffDelayMs,
  createBackoff,
  linkSignals,
  type RetryAttempt,
  retry,
  retryPolicy,
} from '../src/retry.js';
import { settledFlag } from './service-scope.js';

const flush = () => new Promise((resolve) => setImmediate(resolve));

/** Settles `promise` by moving the manual clock forward in steps while it is pending. */
async function drive<T>(clock: ManualClock, promise: Promise<T>, stepMs = 10): Promise<T> {
  const done = settledFlag(promise);
  for (let i = 0; i < 100_000 && !done(); i++) {
    await flush();
    if (!done()) clock.advance(stepMs);
  }
  return promise;
}

/** An operation that fails with `errors` in turn, then returns 'ok'; records each attempt. */
function failing(errors: Error[]) {
  const attempts: (RetryAttempt & { at: number })[] = [];
  let clock: ManualClock | undefined;
  return {
    attempts,
    use(c: ManualClock) {
      clock = c;
      return this;
    },
    operation: async (attempt: RetryAttempt) => {
      attempts.push({ ...attempt, at: clock?.now() ?? 0 });
      const error = errors[attempts.length - 1];
      if (error) throw error;
      return 'ok';
    },
  };
}

const unavailable = () => new DlmError('UNAVAILABLE', 'down', { indeterminate: true });

describe('retry', () => {
  it('retries UNAVAILABLE and LIMIT_EXCEEDED with full-jitter delays whose cap doubles', async () => {
    const clock = createManualClock();
    const op = failing([
      unavailable(),
      new DlmError('LIMIT_EXCEEDED', 'busy'),
      unavailable(),
      unavailable(),
    ]).use(clock);
    const delays: number[] = [];
    const result = await drive(
      clock,
      retry(op.operation, retryPolicy({ attempts: 5, initialDelayMs: 100, maxDelayMs: 300 }), {
        clock,
        random: () => 0.5,
        onRetry: ({ delayMs }) => delays.push(delayMs),
      }),
      1,
    );
    expect(result).toBe('ok');
    expect(op.attempts.map((a) => a.number)).toEqual([1, 2, 3, 4, 5]);
    // Half of the caps 100, 200, 400→300 (capped), 300.
    expect(delays).toEqual([50, 100, 150, 150]);
    // The tries really were that far apart on the clock.
    const gaps = op.attempts.slice(1).map((a, i) => a.at - op.attempts[i]!.at);
    expect(gaps).toEqual([50, 100, 150, 150]);
  });

  it('gives up after `attempts` tries and rejects with the last error itself', async () => {
    const clock = createManualClock();
    const last = unavailable();
    const op = failing([unavailable(), unavailable(), last, unavailable()]).use(clock);
    const failure = await drive(
      clock,
      retry(op.operation, retryPolicy({ attempts: 3 }), { clock }),
    ).catch((error: unknown) => error);
    expect(failure).toBe(last);
    expect(op.attempts).toHaveLength(3);
  });

  it('does not retry NOT_HOLDER, INVALID_PARAMS, CANCELLED, non-dlm errors, or LOCK_HELD unless asked', async () => {
    for (const error of [
      new DlmError('NOT_HOLDER', 'x'),
      new DlmError('INVALID_PARAMS', 'x'),
      new DlmError('CANCELLED', 'x'),
      new DlmError('LOCK_HELD', 'x'),
      new Error('plain'),
    ]) {
      const op = failing([error]);
      await expect(retry(op.operation, retryPolicy({ attempts: 5 }))).rejects.toBe(error);
      expect(op.attempts).toHaveLength(1);
    }
    const clock = createManualClock();
    const held = failing([new DlmError('LOCK_HELD', 'x'), new DlmError('LOCK_HELD', 'x')]).use(
      clock,
    );
    expect(
      await drive(clock, retry(held.operation, retryPolicy({ onLockHeld: true }), { clock })),
    ).toBe('ok');
    expect(held.attempts).toHaveLength(3);
  });

  it('stops at the overall deadline, and tells each try how much time is left', async () => {
    const clock = createManualClock();
    const op = failing(Array.from({ length: 50 }, unavailable)).use(clock);
    const started = clock.now();
    const failure = await drive(
      clock,
      retry(
        op.operation,
        retryPolicy({
          attempts: Number.POSITIVE_INFINITY,
          initialDelayMs: 100,
          maxDelayMs: 100,
          deadlineMs: 1_000,
        }),
        { clock, random: () => 0.99 },
      ),
      1,
    ).catch((error: unknown) => error);
    expect(isDlmError(failure, 'UNAVAILABLE')).toBe(true);
    // 99 ms apart: tries at 0, 99, …, 990; the next delay would end past 1 000.
    expect(op.attempts).toHaveLength(11);
    expect(clock.now() - started).toBeLessThan(1_000);
    expect(op.attempts[0]!.remainingMs).toBe(1_000);
    expect(op.attempts[10]!.remainingMs).toBe(10);
  });

  it('an abort during a delay rejects at once with CANCELLED, the last error as cause', async () => {
    const clock = createManualClock();
    const controller = new AbortController();
    const last = unavailable();
    const op = failing([last, unavailable()]).use(clock);
    const running = retry(
      op.operation,
      retryPolicy({ initialDelayMs: 10_000, maxDelayMs: 10_000, signal: controller.signal }),
      { clock, random: () => 0.99 },
    );
    running.catch(() => {});
    await flush();
    controller.abort();
    const failure = await running.catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: 'CANCELLED', cause: last });
    expect(op.attempts).toHaveLength(1);
  });

  it("each try gets a signal that aborts with the policy's signals", async () => {
    const client = new AbortController();
    const call = new AbortController();
    const policy = retryPolicy({ signal: call.signal }, retryPolicy({ signal: client.signal }));
    expect(policy.signals).toHaveLength(2);
    let seen: AbortSignal | undefined;
    const running = retry(
      (attempt) =>
        new Promise<never>((_, reject) => {
          seen = attempt.signal;
          attempt.signal.addEventListener('abort', () =>
            reject(new DlmError('CANCELLED', 'stopped')),
          );
        }),
      policy,
    );
    await flush();
    expect(seen?.aborted).toBe(false);
    client.abort();
    await expect(running).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(seen?.aborted).toBe(true);
  });
});

describe('retryPolicy', () => {
  it('overrides field by field, `false` means one try, and rejects nonsense naming the field', () => {
    const base = retryPolicy({ attempts: 7, maxDelayMs: 500 });
    expect(retryPolicy({ deadlineMs: 2_000 }, base)).toMatchObject({
      attempts: 7,
      maxDelayMs: 500,
      initialDelayMs: 100,
      deadlineMs: 2_000,
      onLockHeld: false,
    });
    expect(retryPolicy(false, base).attempts).toBe(1);
    expect(retryPolicy(undefined, base)).toBe(base);
    const fieldOf = (options: Parameters<typeof retryPolicy>[0]) => {
      try {
        retryPolicy(options);
      } catch (error) {
        if (isDlmError(error, 'INVALID_PARAMS')) return error.details.field;
        throw error;
      }
      return undefined;
    };
    expect(fieldOf({ attempts: 0 })).toBe('retry.attempts');
    expect(fieldOf({ attempts: 1.5 })).toBe('retry.attempts');
    expect(fieldOf({ attempts: Number.NaN })).toBe('retry.attempts');
    expect(fieldOf({ initialDelayMs: -1 })).toBe('retry.initialDelayMs');
    expect(fieldOf({ maxDelayMs: Number.POSITIVE_INFINITY })).toBe('retry.maxDelayMs');
    expect(fieldOf({ deadlineMs: 0 })).toBe('retry.deadlineMs');
    expect(fieldOf({ attempts: Number.POSITIVE_INFINITY })).toBeUndefined();
  });
});

describe('backoff', () => {
  it('full jitter: delays are uniform below the cap', () => {
    const policy = retryPolicy({ initialDelayMs: 100, maxDelayMs: 5_000 });
    const samples = Array.from({ length: 4_000 }, () => backoffDelayMs(policy, 3));
    expect(Math.min(...samples)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...samples)).toBeLessThan(400);
    const mean = samples.reduce((sum, x) => sum + x, 0) / samples.length;
    expect(mean).toBeGreaterThan(180);
    expect(mean).toBeLessThan(220);
    // Capped: the 20th retry's cap is maxDelayMs, not 100 · 2^19.
    expect(backoffDelayMs(policy, 20, () => 0.999_999)).toBeLessThan(5_000);
  });

  it('createBackoff books `retries` tries, then says stop; a reconnecting caller books them all', () => {
    const clock = createManualClock();
    const policy = retryPolicy({ attempts: 3 });
    const retries = createBackoff(policy, { clock });
    expect([retries.next(), retries.next(), retries.next()].map((d) => d !== undefined)).toEqual([
      true,
      true,
      false,
    ]);
    const reconnects = createBackoff(policy, { clock, retries: policy.attempts });
    expect(
      [reconnects.next(), reconnects.next(), reconnects.next(), reconnects.next()].map(
        (d) => d !== undefined,
      ),
    ).toEqual([true, true, true, false]);
    expect(reconnects.retries).toBe(3);
  });

  it('linkSignals follows its sources until disposed', () => {
    const source = new AbortController();
    const linked = linkSignals([undefined, source.signal]);
    linked.dispose();
    source.abort();
    expect(linked.signal.aborted).toBe(false);
    const again = new AbortController();
    const live = linkSignals([again.signal]);
    again.abort('why');
    expect(live.signal.aborted).toBe(true);
    expect(live.signal.reason).toBe('why');
  });
});
