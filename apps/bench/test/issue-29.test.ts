import { describe, expect, it } from 'vitest';
import { checkIssue29 } from '../src/issue-29.js';
import { type Metrics, metricsOf } from '../src/metrics.js';
import type { TargetFigures } from '../src/report.js';

const figure = (id: string, metrics: Partial<Metrics>): [string, TargetFigures] => [
  id,
  { id, label: id, metrics: { ...metricsOf({}), ...metrics } },
];
const floor = (p99: number) => ({ writesPerSecond: 1_000, p50: p99 / 2, p99, errors: 0 });
/** The checks of figures measured with no floor run. */
const withoutFloors = (...figures: Array<[string, TargetFigures]>) =>
  checkIssue29(new Map(figures), new Map());
const row = (checks: ReturnType<typeof checkIssue29>, start: string) =>
  checks.filter((c) => c.target.startsWith(start));

describe("issue 29's targets", () => {
  it('holds the shared client to raw ioredis: pairs/s ≥ 1.0×, acquire p50 ≤ 1.5×', () => {
    const checks = withoutFloors(
      figure('dlm-embedded-memory', { sharedPairsPerSecond: 20_000, sharedAcquireP50: 0.6 }),
      figure('peer-raw-redis', { sharedPairsPerSecond: 20_001, sharedAcquireP50: 0.4 }),
    );
    expect(row(checks, '1 ').map((c) => c.met)).toEqual([false, true]);
    expect(row(checks, '1 ')[1]?.measured).toBe('0.600 ms vs 0.400 ms (1.50×)');
  });

  it("compares the client's CPU with ioredis's and the server's with redis-server's", () => {
    const checks = withoutFloors(
      figure('dlm-embedded-memory', { throughputClientCpuUs: 53, throughputServerCpuUs: 46 }),
      figure('peer-raw-redis', { throughputClientCpuUs: 53, throughputBackendCpuUs: 30 }),
    );
    const cpu = row(checks, '2 ');
    expect(cpu.map((c) => c.met)).toEqual([true, false]);
    expect(cpu[1]?.measured).toBe('46 µs vs 30 µs (1.53×)');
  });

  it('bounds acquire p99: 5 ms in memory, 10 ms on disk and Redis, 1.2× the floor on etcd and ZooKeeper', () => {
    const checks = checkIssue29(
      new Map([
        figure('dlm-embedded-memory', { throughputAcquireP99: 5 }),
        figure('dlm-embedded-disk', { throughputAcquireP99: 9.9 }),
        figure('dlm-redis', { throughputAcquireP99: 10 }),
        figure('dlm-etcd', { throughputAcquireP99: 36 }),
        figure('dlm-zookeeper', { throughputAcquireP99: 30 }),
      ]),
      new Map([
        ['etcd', floor(30)],
        ['zookeeper', floor(20)],
      ]),
    );
    const p99 = row(checks, '3 ');
    expect(p99.map((c) => c.met)).toEqual([false, true, false, true, false]);
    expect(p99[3]?.measured).toBe('36.0 ms vs floor 30.0 ms (1.20×)');
    const noFloor = withoutFloors(figure('dlm-etcd', { throughputAcquireP99: 1 }));
    expect(row(noFloor, '3 etcd')[0]).toMatchObject({ met: null, measured: 'not measured' });
  });

  it('holds lib-redis to redis-semaphore and PostgreSQL to pg_advisory_lock', () => {
    const checks = withoutFloors(
      figure('lib-redis', { sharedPairsPerSecond: 21_000, contentionHandoffsPerSecond: 3_000 }),
      figure('peer-redis-semaphore', {
        sharedPairsPerSecond: 20_000,
        contentionHandoffsPerSecond: 120,
      }),
      figure('dlm-postgres', { throughputPairsPerSecond: 3_000, uncontendedAcquireP50: 0.4 }),
      figure('peer-pg-advisory', {
        throughputPairsPerSecond: 6_100,
        uncontendedAcquireP50: 0.15,
      }),
    );
    expect(row(checks, '4 ').map((c) => c.met)).toEqual([true, false, null]);
    expect(row(checks, '5 ').map((c) => c.met)).toEqual([false, false]);
  });

  it('holds workloads 6 and 7 on etcd, ZooKeeper and PostgreSQL to the recipe, and counts violations', () => {
    const shared = (semaphore: number, readWrite: number, violations = 0) => ({
      semaphoreGrantsPerSecond: semaphore,
      readWriteGrantsPerSecond: readWrite,
      sharedModeViolations: violations,
    });
    const checks = withoutFloors(
      figure('dlm-etcd', shared(900, 1_100)),
      figure('dlm-zookeeper', shared(1_000, 999)),
      figure('dlm-postgres', shared(2_000, 2_000, 1)),
      figure('peer-zk-rwlock', { readWriteGrantsPerSecond: 1_000 }),
    );
    expect(row(checks, '6 ').map((c) => c.met)).toEqual([
      false,
      true,
      true,
      false,
      true,
      true,
      false,
    ]);
    expect(row(checks, '6 ')[6]?.measured).toBe('1 violations');
  });

  it('says "not measured" for every target of a run without the figures, never met', () => {
    const checks = checkIssue29(new Map(), new Map());
    expect(checks.length).toBeGreaterThanOrEqual(18);
    expect(checks.every((c) => c.met === null)).toBe(true);
  });
});
