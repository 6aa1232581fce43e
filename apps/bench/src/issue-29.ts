import type { FloorBackend, FloorFigures } from './floors.js';
import { sharedClientChecks } from './issue-21.js';
import * as report from './report.js';

/**
 * Issue 29's six targets ("speed, round three"), checked against the figures of one run (medians
 * over its interleaved rounds): every ratio is dlm ÷ a peer measured in the same run.
 */

type Add = ReturnType<typeof report.checker>;

const microseconds: report.Format = (value) => `${Math.round(value)} µs`;

function cpuChecks(add: Add): void {
  add.compare(
    "2 CPU per pair (workload 2): dlm client (embedded, memory) ≤ 1.0× the ioredis client's",
    'dlm-embedded-memory',
    'peer-raw-redis',
    'throughputClientCpuUs',
    (d, p) => d <= p,
    microseconds,
  );
  add.compare(
    "2 CPU per pair (workload 2): embedded server ≤ 1.5× redis-server's",
    'dlm-embedded-memory',
    'peer-raw-redis',
    'throughputServerCpuUs',
    (d, p) => d <= 1.5 * p,
    microseconds,
    'throughputBackendCpuUs',
  );
}

/** Target 3's fixed bounds: acquire p99 at 32 clients in workload 2, ms. */
const P99_BOUNDS: ReadonlyArray<[id: string, name: string, boundMs: number]> = [
  ['dlm-embedded-memory', 'embedded (memory)', 5],
  ['dlm-embedded-disk', 'embedded (data dir)', 10],
  ['dlm-redis', 'redis', 10],
];
/** Target 3 on etcd and ZooKeeper: within this factor of the backend's plain-write floor. */
const FLOOR_FACTOR = 1.2;
const ON_FLOOR: ReadonlyArray<[id: string, backend: FloorBackend]> = [
  ['dlm-etcd', 'etcd'],
  ['dlm-zookeeper', 'zookeeper'],
];

function latencyChecks(
  add: Add,
  floors: ReadonlyMap<FloorBackend, FloorFigures>,
): report.TargetCheck[] {
  for (const [id, name, bound] of P99_BOUNDS) {
    add.absolute(
      `3 ${name}: acquire p99 at 32 clients (workload 2) < ${bound} ms`,
      id,
      'throughputAcquireP99',
      (v) => v < bound,
      report.ms,
    );
  }
  return ON_FLOOR.map(([id, backend]) => {
    const target = `3 ${backend}: acquire p99 at 32 clients (workload 2) ≤ ${FLOOR_FACTOR}× its plain-write floor p99`;
    const p99 = add.get(id, 'throughputAcquireP99');
    const floor = floors.get(backend)?.p99 ?? Number.NaN;
    if (!add.known(p99, floor)) return { target, measured: 'not measured', met: null };
    return {
      target,
      measured: `${report.ms(p99)} vs floor ${report.ms(floor)} (${report.ratio(p99, floor)})`,
      met: p99 <= FLOOR_FACTOR * floor,
    };
  });
}

function libraryPathChecks(add: Add): report.TargetCheck {
  const vs = 'lib-redis, one service, 32 callers vs redis-semaphore Mutex';
  add.compare(
    `4 ${vs}: pairs/s ≥ 1.0× (workload 5)`,
    'lib-redis',
    'peer-redis-semaphore',
    'sharedPairsPerSecond',
    (d, p) => d >= p,
    report.perSecond,
  );
  add.compare(
    `4 ${vs}: handoffs/s ≥ 30× (workload 3)`,
    'lib-redis',
    'peer-redis-semaphore',
    'contentionHandoffsPerSecond',
    (d, p) => d >= 30 * p,
    report.perSecond,
  );
  return {
    target: '4 a service hears only the events of the names it waits on or watches',
    measured: 'not a bench figure (adapter-redis tests)',
    met: null,
  };
}

function postgresChecks(add: Add): void {
  add.compare(
    "5 dlm postgres: pairs/s (workload 2) ≥ 0.5× pg_advisory_lock's",
    'dlm-postgres',
    'peer-pg-advisory',
    'throughputPairsPerSecond',
    (d, p) => d >= 0.5 * p,
    report.perSecond,
  );
  add.compare(
    '5 dlm postgres: uncontended acquire p50 (workload 1) ≤ 2× pg_advisory_lock',
    'dlm-postgres',
    'peer-pg-advisory',
    'uncontendedAcquireP50',
    (d, p) => d <= 2 * p,
    report.ms,
  );
}

/** Target 6's dlm targets, each held to the ZooKeeper read-write recipe's workload-7 grants/s. */
const SHARED_TARGETS: ReadonlyArray<[id: string, name: string]> = [
  ['dlm-etcd', 'etcd'],
  ['dlm-zookeeper', 'zookeeper'],
  ['dlm-postgres', 'postgres'],
];

function sharedModeChecks(
  add: Add,
  figures: Map<string, report.TargetFigures>,
): report.TargetCheck[] {
  const recipe = 'ZooKeeper read-write recipe (workload 7)';
  for (const [id, name] of SHARED_TARGETS) {
    for (const [workload, key] of [
      ['6 semaphore', 'semaphoreGrantsPerSecond'],
      ['7 read-write', 'readWriteGrantsPerSecond'],
    ] as const) {
      add.compare(
        `6 dlm ${name}: workload ${workload} grants/s ≥ 1.0× the ${recipe}`,
        id,
        'peer-zk-rwlock',
        key,
        (d, p) => d >= p,
        report.perSecond,
        'readWriteGrantsPerSecond',
      );
    }
  }
  const ran = SHARED_TARGETS.flatMap(([id]) => figures.get(id) ?? []).filter((f) =>
    add.known(f.metrics.semaphoreGrantsPerSecond),
  );
  const violations = ran.reduce((sum, f) => sum + f.metrics.sharedModeViolations, 0);
  return [
    {
      target: '6 shared modes on etcd, ZooKeeper, PostgreSQL: no holder beyond the modes',
      measured: ran.length ? `${violations} violations` : 'not measured',
      met: ran.length ? violations === 0 : null,
    },
  ];
}

/** Issue 29's targets, numbered as in the issue. */
export function checkIssue29(
  figures: Map<string, report.TargetFigures>,
  floors: ReadonlyMap<FloorBackend, FloorFigures>,
): report.TargetCheck[] {
  const checks: report.TargetCheck[] = [];
  const add = report.checker(figures, checks);
  const what =
    '1 one client, 32 callers (workload 5), embedded (memory) vs raw ioredis on one connection';
  sharedClientChecks(add, what, 1, 1.5);
  cpuChecks(add);
  const onFloors = latencyChecks(add, floors);
  checks.push(...onFloors);
  const hears = libraryPathChecks(add);
  checks.push(hears);
  postgresChecks(add);
  checks.push(...sharedModeChecks(add, figures));
  return checks;
}
