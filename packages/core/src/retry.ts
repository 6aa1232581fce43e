import { type Clock, systemClock } from './clock.js';
import { DlmError, isDlmError } from './errors.js';
import { sleep } from './time.js';

/**
 * How to retry an operation that failed for a reason that may pass: how many tries, how long to
 * wait between them (exponential backoff with full jitter, capped), an overall deadline, and a
 * signal that stops it all.
 */
export interface RetryOptions {
  /** Tries in all, the first one included (1 = no retry). `Infinity`: until the deadline or the signal. */
  attempts?: number;
  /** The cap of the first delay. Each retry doubles the cap, up to `maxDelayMs`. */
  initialDelayMs?: number;
  /** The largest delay cap. Every delay is drawn uniformly from [0, cap) ("full jitter"). */
  maxDelayMs?: number;
  /**
   * Counted from the first try: no try starts, and no delay runs, past it. Callers also bound
   * each try's own timeout by what is left. `Infinity`: no overall deadline.
   */
  deadlineMs?: number;
  /** Stops retrying: the operation rejects with CANCELLED (the pending try gets the signal too). */
  signal?: AbortSignal;
  /**
   * Retry LOCK_HELD as well. Off by default: a server already waits for a held lock (`waitMs`)
   * in the order callers arrived, which client-side retries would only defeat.
   */
  onLockHeld?: boolean;
}

/** `RetryOptions` with every default filled in; `retryPolicy()` makes one. */
export interface RetryPolicy {
  readonly attempts: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly deadlineMs: number;
  readonly onLockHeld: boolean;
  /** Any of them aborting stops retrying (a client-wide signal and a per-call one, say). */
  readonly signals: readonly AbortSignal[];
}

/** 3 tries, delays capped at 100 ms, 200 ms, … 2 s, no overall deadline, LOCK_HELD not retried. */
export const DEFAULT_RETRY: RetryPolicy = Object.freeze({
  attempts: 3,
  initialDelayMs: 100,
  maxDelayMs: 2_000,
  deadlineMs: Number.POSITIVE_INFINITY,
  onLockHeld: false,
  signals: Object.freeze([]) as readonly AbortSignal[],
});

/**
 * Resolves `options` on top of `base` (a client's policy under a call's options, say): fields
 * given override, signals add up. `false` means a single try. Invalid values are INVALID_PARAMS
 * naming the field (`retry.attempts`, …).
 *
 * @example
 * const clientPolicy = retryPolicy({ attempts: 5, maxDelayMs: 1_000 });
 * const callPolicy = retryPolicy({ deadlineMs: 3_000, signal }, clientPolicy);
 */
export function retryPolicy(
  options?: RetryOptions | false,
  base: RetryPolicy = DEFAULT_RETRY,
): RetryPolicy {
  if (options === false) return Object.assign({}, base, { attempts: 1 });
  if (options === undefined) return base;
  const attempts = options.attempts ?? base.attempts;
  const initialDelayMs = options.initialDelayMs ?? base.initialDelayMs;
  const maxDelayMs = options.maxDelayMs ?? base.maxDelayMs;
  const deadlineMs = options.deadlineMs ?? base.deadlineMs;
  if (!(attempts >= 1) || (Number.isFinite(attempts) && !Number.isInteger(attempts))) {
    throw invalid('attempts', 'an integer ≥ 1 or Infinity');
  }
  if (!(initialDelayMs >= 0) || !Number.isFinite(initialDelayMs)) {
    throw invalid('initialDelayMs', 'a finite number ≥ 0');
  }
  if (!(maxDelayMs >= 0) || !Number.isFinite(maxDelayMs)) {
    throw invalid('maxDelayMs', 'a finite number ≥ 0');
  }
  if (!(deadlineMs > 0)) throw invalid('deadlineMs', 'a number > 0 or Infinity');
  return {
    attempts,
    initialDelayMs,
    maxDelayMs,
    deadlineMs,
    onLockHeld: options.onLockHeld ?? base.onLockHeld,
    signals: options.signal ? [...base.signals, options.signal] : base.signals,
  };
}

function invalid(field: string, what: string): DlmError {
  return new DlmError('INVALID_PARAMS', `retry.${field} must be ${what}`, {
    field: `retry.${field}`,
  });
}

/**
 * The delay before retry number `retry` (1 = before the second try): uniform in
 * [0, min(maxDelayMs, initialDelayMs · 2^(retry-1))). Full jitter spreads out the clients that
 * failed together (a server restart drops them all at once) instead of having them return in
 * lockstep.
 */
export function backoffDelayMs(
  policy: Pick<RetryPolicy, 'initialDelayMs' | 'maxDelayMs'>,
  retry: number,
  random: () => number = Math.random,
): number {
  const cap = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** Math.max(0, retry - 1));
  return random() * cap;
}

/**
 * Whether `error` is worth another try under `policy`: UNAVAILABLE (the service or the
 * connection is down, a reply was lost, a timeout) and LIMIT_EXCEEDED (too many requests in
 * flight), and LOCK_HELD only with `onLockHeld`. Everything else — NOT_HOLDER, INVALID_PARAMS,
 * CANCELLED, … — would fail the same way again.
 */
export function isRetryable(error: unknown, policy: Pick<RetryPolicy, 'onLockHeld'>): boolean {
  if (!isDlmError(error)) return false;
  if (error.code === 'UNAVAILABLE' || error.code === 'LIMIT_EXCEEDED') return true;
  return error.code === 'LOCK_HELD' && policy.onLockHeld;
}

/**
 * The stateful half of a policy, for callers that drive their own tries (a connection that
 * reconnects on its own events): each `next()` books one more try and says how long to wait
 * before it.
 */
export interface Backoff {
  /**
   * The delay before the next try, or `undefined` when the policy allows none: tries used up,
   * the deadline would pass during the delay, or a signal aborted.
   */
  next(): number | undefined;
  /** Tries booked through `next()` so far. */
  readonly retries: number;
  /** Milliseconds left before the overall deadline (`Infinity` without one). */
  remainingMs(): number;
}

export interface BackoffOptions {
  clock?: Clock;
  random?: () => number;
  /**
   * How many tries `next()` may book. Default `policy.attempts - 1`: the first try is made
   * without asking (as `retry()` does). A reconnecting connection, whose every try is delayed,
   * passes `policy.attempts`.
   */
  retries?: number;
}

/** Starts a backoff sequence under `policy`; the overall deadline counts from now. */
export function createBackoff(policy: RetryPolicy, options: BackoffOptions = {}): Backoff {
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const allowed = options.retries ?? policy.attempts - 1;
  const deadlineAt = clock.now() + policy.deadlineMs;
  let retries = 0;
  return {
    next() {
      if (retries >= allowed || policy.signals.some((signal) => signal.aborted)) return undefined;
      const delayMs = backoffDelayMs(policy, retries + 1, random);
      if (clock.now() + delayMs >= deadlineAt) return undefined;
      retries++;
      return delayMs;
    },
    get retries() {
      return retries;
    },
    remainingMs: () => deadlineAt - clock.now(),
  };
}

/** What each try of `retry()` gets. */
export interface RetryAttempt {
  /** 1 for the first try. */
  readonly number: number;
  /** Before the overall deadline: bound the try's own timeout by it. `Infinity` without one. */
  readonly remainingMs: number;
  /** Aborts when the policy's signals do: pass it to the call. */
  readonly signal: AbortSignal;
}

export interface RetryRunOptions {
  clock?: Clock;
  random?: () => number;
  /** Overrides `isRetryable(error, policy)`. */
  shouldRetry?(error: unknown, attempt: RetryAttempt): boolean;
  /** Called before each delay, for logging. */
  onRetry?(event: { error: unknown; attempt: RetryAttempt; delayMs: number }): void;
}

/**
 * Runs `operation` until it succeeds, fails with an error not worth retrying, or the policy
 * gives up; then rejects with the last error as it was (so callers still match on its `code`).
 * An abort of the policy's signals rejects with CANCELLED (the last error, if any, as `cause`).
 * Retries only make sense for operations that are safe to repeat: the caller's job (a client
 * re-sends an acquire with the same owner, so a grant whose reply was lost comes back as the same
 * lease).
 *
 * @example
 * const value = await retry(
 *   (attempt) => fetchState({ timeoutMs: Math.min(2_000, attempt.remainingMs), signal: attempt.signal }),
 *   retryPolicy({ attempts: 5, deadlineMs: 10_000 }),
 * );
 */
export function retry<T>(
  operation: (attempt: RetryAttempt) => Promise<T>,
  policy: RetryPolicy,
  options: RetryRunOptions = {},
): Promise<T> {
  const { signals } = policy;
  const stopped = abortedOf(signals);
  if (stopped) return Promise.reject(cancelled(stopped, undefined));
  const clock = options.clock ?? systemClock;
  // Several signals are linked for the attempts, and unlinked when the run ends.
  if (signals.length > 1) {
    const run = new RetryRun(operation, policy, options, clock, clock.now());
    const attempt = run.attempt(1);
    return tryOnce(operation, attempt).then(
      (value) => {
        run.dispose();
        return value;
      },
      (error: unknown) => run.afterFailure(error, attempt),
    );
  }
  // The common case, a first attempt that succeeds, builds no run, no backoff and no async
  // function: the first attempt is called directly, and only its failure makes the run.
  const startedAt = clock.now();
  const attempt = new Attempt(1, policy.deadlineMs, signals[0]);
  return tryOnce(operation, attempt).catch((error: unknown) =>
    new RetryRun(operation, policy, options, clock, startedAt).afterFailure(error, attempt),
  );
}

function tryOnce<T>(
  operation: (attempt: RetryAttempt) => Promise<T>,
  attempt: RetryAttempt,
): Promise<T> {
  try {
    return operation(attempt);
  } catch (error) {
    return Promise.reject(error);
  }
}

function abortedOf(signals: readonly AbortSignal[]): AbortSignal | undefined {
  for (const source of signals) if (source.aborted) return source;
  return undefined;
}

/**
 * One try: its signal is the run's (made when first read), the policy's only one, or, with
 * none, a signal of its own that never aborts (made when first read).
 */
class Attempt implements RetryAttempt {
  private own: AbortSignal | undefined;

  constructor(
    readonly number: number,
    readonly remainingMs: number,
    private readonly source: RetryRun<unknown> | AbortSignal | undefined,
  ) {}

  get signal(): AbortSignal {
    const { source } = this;
    if (source instanceof RetryRun) return source.signal();
    if (source) return source;
    this.own ??= new AbortController().signal;
    return this.own;
  }
}

/** The state of one `retry()`, kept out of closures so the first attempt allocates little. */
class RetryRun<T> {
  // One signal is passed through as it is; several are linked only once an attempt reads
  // `signal` (nothing else can abort the linked one, so creating it late changes nothing).
  private linked: { signal: AbortSignal; dispose(): void } | undefined;
  private backoff: Backoff | undefined;

  constructor(
    private readonly operation: (attempt: RetryAttempt) => Promise<T>,
    private readonly policy: RetryPolicy,
    private readonly options: RetryRunOptions,
    private readonly clock: Clock,
    readonly startedAt: number,
  ) {}

  signal(): AbortSignal {
    const { signals } = this.policy;
    if (signals.length === 1) return signals[0]!;
    this.linked ??= linkSignals(signals);
    return this.linked.signal;
  }

  aborted(): AbortSignal | undefined {
    return abortedOf(this.policy.signals);
  }

  attempt(number: number): RetryAttempt {
    const remainingMs = this.startedAt + this.policy.deadlineMs - this.clock.now();
    return new Attempt(number, remainingMs, this as RetryRun<unknown>);
  }

  dispose(): void {
    this.linked?.dispose();
  }

  /** Decides after a failed attempt: the error as it is, or the next tries. */
  async afterFailure(error: unknown, attempt: RetryAttempt): Promise<T> {
    try {
      let lastError = error;
      let failed = attempt;
      for (;;) {
        const { options, policy, clock } = this;
        const worthIt = options.shouldRetry
          ? options.shouldRetry(lastError, failed)
          : isRetryable(lastError, policy);
        if (!worthIt || this.aborted()) throw lastError;
        // Made at the first failure, with the deadline still counted from the first attempt.
        this.backoff ??= createBackoff(
          Object.assign({}, policy, {
            deadlineMs: this.startedAt + policy.deadlineMs - clock.now(),
          }),
          { clock, ...(options.random ? { random: options.random } : {}) },
        );
        const delayMs = this.backoff.next();
        if (delayMs === undefined) throw lastError;
        options.onRetry?.({ error: lastError, attempt: failed, delayMs });
        await sleep(clock, delayMs, this.signal());
        const stopped = this.aborted();
        if (stopped) throw cancelled(stopped, lastError);
        failed = this.attempt(failed.number + 1);
        try {
          return await this.operation(failed);
        } catch (next) {
          lastError = next;
        }
      }
    } finally {
      this.dispose();
    }
  }
}

function cancelled(signal: AbortSignal, lastError: unknown): DlmError {
  const reason: unknown = signal.reason;
  if (isDlmError(reason, 'CANCELLED')) return reason;
  return new DlmError('CANCELLED', 'retrying was cancelled', {
    cause: lastError ?? reason,
  });
}

/**
 * One signal that aborts when any of `signals` does, with listeners removed by `dispose()`.
 * (Unlike `AbortSignal.any`, nothing stays attached to a long-lived signal, such as a
 * client-wide one, after the operation ends.)
 */
export function linkSignals(signals: readonly (AbortSignal | undefined)[]): {
  signal: AbortSignal;
  dispose(): void;
} {
  const controller = new AbortController();
  const sources = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  const already = sources.find((signal) => signal.aborted);
  if (already) {
    controller.abort(already.reason);
    return { signal: controller.signal, dispose() {} };
  }
  const listeners = sources.map((source) => {
    const listener = () => controller.abort(source.reason);
    source.addEventListener('abort', listener, { once: true });
    return () => source.removeEventListener('abort', listener);
  });
  return {
    signal: controller.signal,
    dispose() {
      for (const remove of listeners) remove();
    },
  };
}
