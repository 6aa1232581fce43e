/** Resolves after `ms` milliseconds (a test's pause: timing the suite, not the code under test). */
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Whether `promise` is still unsettled `ms` from now (a test's look at a waiter that must not be
 * answered yet): false as soon as it fulfils or rejects.
 */
export async function pendingAfter(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const pending = Symbol('pending');
  const settled = promise.then(
    () => undefined,
    () => undefined,
  );
  return (await Promise.race([settled, sleep(ms).then(() => pending)])) === pending;
}

/** How long `until` polls, how often, and what it waits for (for the error). A number: `timeoutMs`. */
export interface UntilOptions {
  timeoutMs?: number;
  intervalMs?: number;
  what?: string;
}

/**
 * Polls `check` (a test-side observation of the store, never the code under test) every
 * `intervalMs` until it holds, and throws `what` once `timeoutMs` has passed without it.
 *
 * @example
 * await until(async () => (await queueEntries(name)).length >= 2, { what: 'two waiters queued' });
 */
export async function until(
  check: () => Promise<boolean> | boolean,
  options: UntilOptions | number = {},
): Promise<void> {
  const {
    timeoutMs = 5_000,
    intervalMs = 20,
    what = 'the condition',
  } = typeof options === 'number' ? { timeoutMs: options } : options;
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`expected ${what} within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
}
