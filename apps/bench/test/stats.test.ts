import { describe, expect, it } from 'vitest';
import { combine, metricsOf } from '../src/metrics.js';
import { checkTargets, type TargetFigures } from '../src/report.js';
import { createSamples, fairness, median, percentile, summarize } from '../src/stats.js';

// The benchmark itself runs from `pnpm bench` (and `--smoke` in CI), not here: these tests pin
// the arithmetic the published figures depend on.

describe('stats', () => {
  it('percentile uses the nearest rank: p99 of 1..1000 is 990, p50 is 500', () => {
    const sorted = Float64Array.from({ length: 1000 }, (_, i) => i + 1);
    expect(percentile(sorted, 0.99)).toBe(990);
    expect(percentile(sorted, 0.5)).toBe(500);
    expect(percentile(sorted, 1)).toBe(1000);
    expect(percentile([], 0.5)).toBeNaN();
  });

  it('summarize sorts numerically, not as strings', () => {
    const summary = summarize([10, 9, 100, 2]);
    expect(summary.p50).toBe(9);
    expect(summary.max).toBe(100);
    expect(summary.mean).toBeCloseTo(30.25);
  });

  it('samples keep every value past the initial capacity', () => {
    const samples = createSamples(2);
    for (let i = 1; i <= 5; i++) samples.push(i);
    expect(samples.count).toBe(5);
    expect(samples.summary().max).toBe(5);
    expect(samples.summary().p50).toBe(3);
  });

  it('fairness is the smallest share over an equal share', () => {
    expect(fairness([10, 10, 10, 10])).toBe(1);
    expect(fairness([5, 10, 15])).toBeCloseTo(0.5);
    expect(fairness([0, 10])).toBe(0);
    expect(fairness([])).toBe(0);
  });

  it('median ignores runs that measured nothing', () => {
    expect(median([3, Number.NaN, 1, 2])).toBe(2);
    expect(median([1, 4])).toBe(2.5);
    expect(median([Number.NaN])).toBeNaN();
  });
});

describe('combining runs and checking targets', () => {
  const contention = (violations: number, handoffsPerSecond: number) => ({
    grantsPerSecond: handoffsPerSecond,
    handoffsPerSecond,
    grants: 1,
    handoffs: 1,
    handoff: { count: 1, p50: 1, p99: 1, mean: 1, max: 1 },
    fairness: 1,
    grantsPerClient: [1],
    violations,
    timeouts: 0,
    errors: 0,
    durationMs: 1000,
  });

  it('takes medians of figures but sums violations, so one bad run shows', () => {
    const combined = combine([
      metricsOf({ contention: contention(0, 100) }),
      metricsOf({ contention: contention(2, 300) }),
      metricsOf({ contention: contention(0, 200) }),
    ]);
    expect(combined.contentionHandoffsPerSecond).toBe(200);
    expect(combined.contentionViolations).toBe(2);
  });

  it('reports a missed target, a met one, and n/a when a figure was not measured', () => {
    const figures = new Map<string, TargetFigures>([
      [
        'dlm-embedded-memory',
        {
          id: 'dlm-embedded-memory',
          label: 'dlm embedded (memory)',
          metrics: metricsOf({ contention: contention(0, 12_000) }),
        },
      ],
      [
        'dlm-redis',
        {
          id: 'dlm-redis',
          label: 'dlm redis',
          metrics: metricsOf({ contention: contention(1, 50) }),
        },
      ],
    ]);
    const checks = checkTargets(figures, undefined);
    const find = (text: string) => checks.find((check) => check.target.startsWith(text));
    expect(find('embedded (memory): ≥ 10,000 handoffs/s')?.met).toBe(true);
    expect(find('embedded (memory): uncontended acquire p50')?.met).toBeNull();
    expect(find('dlm redis: mutual exclusion')?.met).toBe(false);
  });
});
