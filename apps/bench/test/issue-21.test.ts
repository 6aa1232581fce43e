import { describe, expect, it } from 'vitest';
import { checkIssue21 } from '../src/issue-21.js';
import { type Metrics, metricsOf } from '../src/metrics.js';
import type { TargetFigures } from '../src/report.js';

const figure = (id: string, metrics: Partial<Metrics>): [string, TargetFigures] => [
  id,
  { id, label: id, metrics: { ...metricsOf({}), ...metrics } },
];
const floor = (p99: number) => ({ writesPerSecond: 1_000, p50: p99 / 2, p99, errors: 0 });

describe("issue 21's targets", () => {
  it('holds acquire p99 to 10 ms, or to 1.2× its backend floor where the floor was measured', () => {
    const figures = new Map([
      figure('dlm-embedded-memory', { throughputAcquireP99: 4 }),
      figure('dlm-etcd', { throughputAcquireP99: 36 }),
      figure('lib-etcd', { throughputAcquireP99: 37 }),
      figure('dlm-zookeeper', { throughputAcquireP99: 30 }),
      figure('dlm-redis', { throughputAcquireP99: 12 }),
    ]);
    const checks = checkIssue21(
      figures,
      new Map([
        ['etcd', floor(30.5)],
        ['zookeeper', floor(20)],
      ]),
      undefined,
    );
    const p99 = (id: string) => checks.find((c) => c.target.startsWith(`4 ${id}:`));
    expect(p99('dlm-embedded-memory')?.met).toBe(true);
    expect(p99('dlm-etcd')).toMatchObject({
      met: true,
      measured: '36.0 ms; etcd floor p99 30.5 ms (1.18×)',
    });
    expect(p99('lib-etcd')?.met).toBe(false); // 1.21×
    expect(p99('dlm-zookeeper')?.met).toBe(false);
    expect(p99('dlm-redis')).toMatchObject({ met: false, measured: '12.0 ms' }); // no floor for Redis
    expect(p99('dlm-redlock')).toBeUndefined(); // best-effort fencing: not a strict backend
  });

  it('compares lib-redis with redis-semaphore: workload 5 pairs/s, acquire p50, handoffs', () => {
    const figures = new Map([
      figure('lib-redis', {
        sharedPairsPerSecond: 45_000,
        uncontendedAcquireP50: 0.14,
        contentionHandoffsPerSecond: 2_000,
      }),
      figure('peer-redis-semaphore', {
        sharedPairsPerSecond: 50_000,
        uncontendedAcquireP50: 0.1,
        contentionHandoffsPerSecond: 70,
      }),
    ]);
    const lib = checkIssue21(figures, new Map(), undefined).filter((c) =>
      c.target.startsWith('2 '),
    );
    expect(lib.map((c) => c.met)).toEqual([true, false, false]);
    expect(lib[2]?.measured).toBe('2000/s vs 70/s (28.57×)');
  });
});
