import { median } from './stats.js';
import type { ContentionResult } from './workloads/contention.js';
import type { SharedModesResult } from './workloads/shared-modes.js';
import type { ThroughputResult } from './workloads/throughput.js';
import type { UncontendedResult } from './workloads/uncontended.js';

/** One run of workloads 1–3 on one target. */
export interface TargetRun {
  uncontended?: UncontendedResult;
  throughput?: ThroughputResult;
  /** Workload 5: workload 2's callers over one shared client. */
  shared?: ThroughputResult;
  contention?: ContentionResult;
  /** Workload 6: one semaphore. */
  semaphore?: SharedModesResult;
  /** Workload 7: one read-write lock. */
  readWrite?: SharedModesResult;
  /** Why a dlm target ran neither (its backend has no `sharedModes`). */
  sharedSkipped?: string;
  error?: string;
}

/** The figures the table and the targets use, for one run or as medians over runs. */
export interface Metrics {
  uncontendedAcquireP50: number;
  uncontendedAcquireP99: number;
  uncontendedReleaseP50: number;
  uncontendedReleaseP99: number;
  throughputPairsPerSecond: number;
  throughputPairP50: number;
  throughputPairP99: number;
  throughputAcquireP99: number;
  /** CPU µs per pair in workload 2: the benchmark process (clients), dlm's server, the services. */
  throughputClientCpuUs: number;
  throughputServerCpuUs: number;
  throughputBackendCpuUs: number;
  sharedPairsPerSecond: number;
  sharedPairP50: number;
  sharedPairP99: number;
  sharedAcquireP50: number;
  contentionGrantsPerSecond: number;
  contentionHandoffsPerSecond: number;
  contentionHandoffP50: number;
  contentionHandoffP99: number;
  contentionFairness: number;
  /** Summed over runs, not a median: one violation anywhere is one too many. */
  contentionViolations: number;
  semaphoreGrantsPerSecond: number;
  semaphoreAcquireP50: number;
  semaphoreAcquireP99: number;
  readWriteGrantsPerSecond: number;
  readWriteReadP50: number;
  readWriteReadP99: number;
  readWriteWriteP99: number;
  /** Workloads 6 and 7, summed: more holders than the modes allow. */
  sharedModeViolations: number;
  /** Summed over runs and workloads. */
  errors: number;
  /** Contention waits that ran out, summed. */
  timeouts: number;
}

const NaN_ = Number.NaN;

export function metricsOf(run: TargetRun): Metrics {
  const { uncontended: u, throughput: t, shared: sh, contention: c } = run;
  const { semaphore: sem, readWrite: rw } = run;
  return {
    uncontendedAcquireP50: u?.acquire.p50 ?? NaN_,
    uncontendedAcquireP99: u?.acquire.p99 ?? NaN_,
    uncontendedReleaseP50: u?.release.p50 ?? NaN_,
    uncontendedReleaseP99: u?.release.p99 ?? NaN_,
    throughputPairsPerSecond: t?.pairsPerSecond ?? NaN_,
    throughputPairP50: t?.pair.p50 ?? NaN_,
    throughputPairP99: t?.pair.p99 ?? NaN_,
    throughputAcquireP99: t?.acquire.p99 ?? NaN_,
    throughputClientCpuUs: t?.cpuUsPerPair.client ?? NaN_,
    throughputServerCpuUs: t?.cpuUsPerPair.server ?? NaN_,
    throughputBackendCpuUs: t?.cpuUsPerPair.backend ?? NaN_,
    sharedPairsPerSecond: sh?.pairsPerSecond ?? NaN_,
    sharedPairP50: sh?.pair.p50 ?? NaN_,
    sharedPairP99: sh?.pair.p99 ?? NaN_,
    sharedAcquireP50: sh?.acquire.p50 ?? NaN_,
    contentionGrantsPerSecond: c?.grantsPerSecond ?? NaN_,
    contentionHandoffsPerSecond: c?.handoffsPerSecond ?? NaN_,
    contentionHandoffP50: c?.handoff.p50 ?? NaN_,
    contentionHandoffP99: c?.handoff.p99 ?? NaN_,
    contentionFairness: c?.fairness ?? NaN_,
    contentionViolations: c?.violations ?? 0,
    semaphoreGrantsPerSecond: sem?.grantsPerSecond ?? NaN_,
    semaphoreAcquireP50: sem?.acquire.p50 ?? NaN_,
    semaphoreAcquireP99: sem?.acquire.p99 ?? NaN_,
    readWriteGrantsPerSecond: rw?.grantsPerSecond ?? NaN_,
    readWriteReadP50: rw?.reads?.acquire.p50 ?? NaN_,
    readWriteReadP99: rw?.reads?.acquire.p99 ?? NaN_,
    readWriteWriteP99: rw?.writes?.acquire.p99 ?? NaN_,
    sharedModeViolations: (sem?.violations ?? 0) + (rw?.violations ?? 0),
    errors:
      (u?.errors ?? 0) +
      (t?.errors ?? 0) +
      (sh?.errors ?? 0) +
      (c?.errors ?? 0) +
      (sem?.errors ?? 0) +
      (rw?.errors ?? 0) +
      (run.error ? 1 : 0),
    timeouts: c?.timeouts ?? 0,
  };
}

const SUMMED: ReadonlySet<keyof Metrics> = new Set([
  'contentionViolations',
  'sharedModeViolations',
  'errors',
  'timeouts',
]);

/** Medians over runs (sums for violations, errors and timeouts). */
export function combine(runs: Metrics[]): Metrics {
  const keys = Object.keys(runs[0] ?? metricsOf({})) as (keyof Metrics)[];
  const combined = {} as Metrics;
  for (const key of keys) {
    const values = runs.map((run) => run[key]);
    combined[key] = SUMMED.has(key) ? values.reduce((a, b) => a + b, 0) : median(values);
  }
  return combined;
}
