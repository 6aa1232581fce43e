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

  it('reads the scale result: judged at the target size only, recovery when h-scale measured it', () => {
    const scale = (sessions: number, locks: number, recoveryMs?: number) =>
      ({
        sessions,
        locks,
        probeAtLocks: 1_000,
        rssMiB: { idle: 50, sessions: 400, atProbe: 400, full: 900 },
        acquireAtProbe: { count: 1, p50: 0.1, p99: 1, mean: 0.1, max: 1 },
        acquireAtFull: { count: 1, p50: 0.1, p99: 1.4, mean: 0.1, max: 1.4 },
        p99Ratio: 1.4,
        ...(recoveryMs === undefined ? {} : { recoveryMs }),
      }) as unknown as Parameters<typeof checkIssue21>[2];
    const rows = (s: Parameters<typeof checkIssue21>[2]) =>
      checkIssue21(new Map(), new Map(), s).filter((c) => c.target.startsWith('5 '));
    expect(rows(scale(50_000, 500_000, 4_200)).map((c) => c.met)).toEqual([true, true, true]);
    expect(rows(scale(50_000, 500_000, 4_200))[2]?.measured).toBe('4.2 s');
    expect(rows(scale(200, 2_000)).map((c) => c.met)).toEqual([null, null, null]);
  });
});
