/**
 * Milliseconds on the machine's monotonic clock (CLOCK_MONOTONIC via `process.hrtime`), with
 * microsecond precision. Unlike `performance.now()`, whose origin is each process's start,
 * this reads the same in every process on the machine, so events recorded by different
 * processes can be ordered on one time line.
 */
export function monoNow(): number {
  return Number(process.hrtime.bigint() / 1_000n) / 1_000;
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
