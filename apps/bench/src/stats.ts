/**
 * Latency samples and their summaries. Samples are milliseconds from `performance.now()`
 * (monotonic); percentiles use the nearest-rank method, so p99 of 1,000 samples is the 990th.
 */

export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  mean: number;
  max: number;
}

/** A growable sample buffer that does not box each number (thousands of samples per second). */
export interface Samples {
  push(ms: number): void;
  readonly count: number;
  summary(): LatencySummary;
}

export function createSamples(initialCapacity = 4_096): Samples {
  let data = new Float64Array(initialCapacity);
  let count = 0;
  return {
    push(ms) {
      if (count === data.length) {
        const grown = new Float64Array(data.length * 2);
        grown.set(data);
        data = grown;
      }
      data[count++] = ms;
    },
    get count() {
      return count;
    },
    summary: () => summarize(data.subarray(0, count)),
  };
}

/** The nearest-rank percentile of sorted values (`q` in 0..1); NaN when there are none. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[Math.min(rank, sorted.length) - 1]!;
}

export function summarize(values: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(values).sort();
  let total = 0;
  for (const value of sorted) total += value;
  return {
    count: sorted.length,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    mean: sorted.length ? total / sorted.length : Number.NaN,
    max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
  };
}

/**
 * The smallest share of grants any client got, relative to an equal share: 1 is perfectly
 * even, 0 means some client never got the lock.
 */
export function fairness(grantsPerClient: readonly number[]): number {
  const total = grantsPerClient.reduce((sum, grants) => sum + grants, 0);
  if (total === 0 || grantsPerClient.length === 0) return 0;
  return Math.min(...grantsPerClient) / (total / grantsPerClient.length);
}

/** The median of the finite values (NaN when none): how repeated runs are combined. */
export function median(values: readonly number[]): number {
  const finite = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (finite.length === 0) return Number.NaN;
  const middle = finite.length >> 1;
  return finite.length % 2 ? finite[middle]! : (finite[middle - 1]! + finite[middle]!) / 2;
}
