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

/** Parses `60s`, `2m`, `1500ms` or a bare number of seconds into milliseconds. */
export function parseDurationMs(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) throw new Error(`not a duration: ${JSON.stringify(text)} (use 500ms, 60s, 10m)`);
  const value = Number(match[1]);
  const unit = match[2] ?? 's';
  const factor = unit === 'ms' ? 1 : unit === 's' ? 1_000 : unit === 'm' ? 60_000 : 3_600_000;
  return Math.round(value * factor);
}
