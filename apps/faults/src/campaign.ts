import { join } from 'node:path';
import type { BackendCapabilities } from '@dlm/core';
import { tempDir } from '@dlm/test-services';
import { PROPERTIES, type Property } from './checker.js';
import { type DlmServer, type Plant, startDlmServer } from './dlm-server.js';
import { expectedLinearizabilityReason, expectedReason } from './expectations.js';
import { type LockSegmentOptions, type LockSegmentResult, runLockSegment } from './lock-segment.js';
import { NEMESES, type Nemesis, nemesisNamed } from './nemeses.js';
import {
  runSegment,
  runSharedSegment,
  type SegmentResult,
  type WorkloadOptions,
} from './segment.js';
import { type BackendVariant, startTopology, type Topology } from './topology.js';

export interface CampaignOptions extends WorkloadOptions {
  backends: BackendVariant[];
  /** Nemesis names per backend; `all` is every nemesis that applies to the backend. */
  nemeses: (backend: BackendVariant) => string[] | 'all';
  /** Faults per segment (one segment per nemesis). */
  durationMs: number;
  /** Per-backend overrides of `durationMs`. */
  durationsMs?: Partial<Record<BackendVariant, number>>;
  /** The resource's fencing check for every segment (off: everything is a negative control). */
  fencing: boolean;
  /**
   * Add the negative control: client pauses with the resource's fencing check off, on the
   * first backend. The campaign fails unless the checker reports lost updates there.
   */
  negativeControl: boolean;
  /**
   * Nemesis names per backend for linearizability segments (try-acquire / release / get on
   * two dlm servers where the backend is shared); none when absent.
   */
  lockNemeses?: (backend: BackendVariant) => string[];
  /** Faults per linearizability segment. Default 6 s. */
  lockDurationMs?: number;
  /** Per-backend overrides of `lockDurationMs`. */
  lockDurationsMs?: Partial<Record<BackendVariant, number>>;
  /** Connections in a linearizability segment, spread over its servers. Default 8. */
  lockConnections?: number;
  /** Lock names they share. Default 3. */
  lockNames?: number;
  /** A linearizability client's pause between operations, random up to this, ms. Default 10. */
  lockThinkMs?: number;
  /**
   * Add the linearizability segments' negative control where the backend is PostgreSQL: the
   * same workload on two servers whose try-lock takes its token before the name's row lock
   * (planted-early-token.ts). The campaign fails unless the checker flags it.
   */
  linNegativeControl?: boolean;
  /**
   * Add the lock-delay segments on the campaign's first backend (its server must keep lock-delays): client
   * pauses with every exclusive acquire asking for a lock-delay, on the real server (S9 must
   * not show) and on a planted one whose backend ignores the delay (S9 must show, or the
   * campaign fails).
   */
  lockDelayControl?: boolean;
  /**
   * Add the hold-cap segments on the campaign's first backend (its server must keep caps on holding): client
   * pauses with every exclusive acquire asking for a cap of one TTL (so every extend asks past
   * it), on the real server (S10 must not show) and on a planted one whose backend ignores the
   * cap (S10 must show, or the campaign fails).
   */
  holdCapControl?: boolean;
  /**
   * Nemesis names per backend for shared-mode segments (a semaphore and a read-write lock side
   * by side, checked for S7); none when absent. Only on backends whose server declares
   * `sharedModes` and strict fencing: the others are skipped with a line saying so.
   */
  sharedNemeses?: (backend: BackendVariant) => string[];
  /** Faults per shared-mode segment. Default 6 s. */
  sharedDurationMs?: number;
  /** Backends run side by side, each on its own services. Default 1 (one after another). */
  lanes?: number;
  historyDir?: string;
  log?: (line: string) => void;
}

export interface LockSegmentReport extends LockSegmentResult {
  kind: string;
  capabilities: BackendCapabilities;
  /** Why the violations are expected, or null when they are a failure (none: no violation). */
  expected: string | null | undefined;
  unexpected: number;
}

export interface SegmentReport extends SegmentResult {
  kind: string;
  capabilities: BackendCapabilities;
  negativeControl: boolean;
  /** Per property with violations: why they are expected, or null when they are a failure. */
  expected: Partial<Record<Property, string | null>>;
  /** Violations that no declared capability explains. */
  unexpected: number;
}

export interface CampaignResult {
  startedAt: string;
  finishedAt: string;
  options: Omit<CampaignOptions, 'nemeses' | 'lockNemeses' | 'sharedNemeses' | 'log'> & {
    plan: Record<string, string[]>;
    lockPlan: Record<string, string[]>;
    sharedPlan?: Record<string, string[]>;
  };
  segments: SegmentReport[];
  /** Linearizability segments. */
  lockSegments: LockSegmentReport[];
  /** Startup failures and the like, per backend. */
  errors: string[];
  /** Backends whose shared-mode segments were planned but not run, and why (capability gate). */
  sharedSkipped?: string[];
  negativeControl: { run: boolean; detected: boolean; lostUpdates: number } | undefined;
  /** The linearizability negative control, when asked for and a PostgreSQL backend ran. */
  linNegativeControl?: LinControlReport | undefined;
  /** The lock-delay segments' negative control, when asked for and a backend keeps lock-delays. */
  lockDelayControl?: ControlReport | undefined;
  /** The hold-cap segments' negative control, when asked for and a backend keeps caps. */
  holdCapControl?: ControlReport | undefined;
  /** No unexpected violation anywhere, and the negative controls (if run) detected. */
  passed: boolean;
}

/** The planted backend's linearizability segment: detected when a name is not linearizable. */
export interface LinControlReport {
  backend: string;
  detected: boolean;
  /** Names flagged not linearizable. */
  violations: number;
  ops: number;
  durationMs: number;
  /** The first flagged name's message. */
  example?: string | undefined;
}

function annotate(
  result: SegmentResult,
  server: DlmServer,
  negativeControl: boolean,
): SegmentReport {
  const expected: SegmentReport['expected'] = {};
  let unexpected = 0;
  for (const property of PROPERTIES) {
    const count = result.check.counts[property];
    if (!count) continue;
    const reason = expectedReason(property, {
      capabilities: server.capabilities,
      kind: server.kind,
      nemesis: result.nemesis,
      fencing: result.fencing,
    });
    expected[property] = reason ?? null;
    if (!reason) unexpected += count;
  }
  return {
    ...result,
    kind: server.kind,
    capabilities: server.capabilities,
    negativeControl,
    expected,
    unexpected,
  };
}

function planFor(backend: BackendVariant, options: CampaignOptions): Nemesis[] {
  const wanted = options.nemeses(backend);
  if (wanted === 'all') {
    return NEMESES.filter((nemesis) => nemesis.name !== 'none' && nemesis.appliesTo(backend));
  }
  return wanted.map((name) => {
    const nemesis = nemesisNamed(name);
    if (!nemesis) throw new Error(`unknown nemesis ${JSON.stringify(name)}`);
    return nemesis;
  });
}

/** What the segments of one backend share. */
interface BackendRun {
  backend: BackendVariant;
  topology: Topology;
  server: DlmServer;
  historyDir: string;
  options: CampaignOptions;
  log: (line: string) => void;
}

/**
 * The fenced read-modify-write segments, one per nemesis, and the negative control if asked.
 * Each report goes to `reports` as soon as it is made, so a later failure keeps it.
 */
async function runFencedSegments(
  run: BackendRun,
  nemeses: Nemesis[],
  control: boolean,
  reports: SegmentReport[],
): Promise<void> {
  const { backend, topology, server, options, log } = run;
  const runs: { nemesis: Nemesis; fencing: boolean; control: boolean }[] = nemeses.map(
    (nemesis) => ({ nemesis, fencing: options.fencing, control: false }),
  );
  if (control) {
    runs.push({ nemesis: nemesisNamed('client-pause')!, fencing: false, control: true });
  }
  for (const segment of runs) {
    const label = `${backend} × ${segment.nemesis.name}${segment.control ? ' (fencing off)' : ''}`;
    const durationMs = options.durationsMs?.[backend] ?? options.durationMs;
    log(`${label}: ${Math.round(durationMs / 1000)} s`);
    const result = await runSegment(topology, server, {
      ...options,
      durationMs,
      nemesis: segment.nemesis,
      fencing: segment.fencing,
      dir: join(
        run.historyDir,
        backend,
        `${segment.nemesis.name}${segment.control ? '-fencing-off' : ''}`,
      ),
      log,
    });
    const report = annotate(result, server, segment.control);
    reports.push(report);
    const shown = PROPERTIES.filter((p) => report.check.counts[p])
      .map((p) => `${p}=${report.check.counts[p]}${report.expected[p] ? ' (expected)' : ''}`)
      .join(' ');
    log(
      `${label}: ${report.check.stats.ops} ops, ${report.check.stats.grants} grants, ${report.check.stats.faults} faults, ${report.check.stats.meddling.refused}/${report.check.stats.meddling.answered} meddling calls refused; ${shown || 'no violations'}${report.check.doubleGrants ? `; ${report.check.doubleGrants} double grants` : ''}`,
    );
  }
}

/**
 * The linearizability segments, over `servers` (two on a shared backend, one on embedded); each
 * report goes to `reports` as soon as it is made.
 */
async function runLockSegments(
  run: BackendRun,
  servers: DlmServer[],
  lockNemeses: Nemesis[],
  reports: LockSegmentReport[],
): Promise<void> {
  const { backend, topology, server, options, log } = run;
  for (const nemesis of lockNemeses) {
    const label = `${backend} × ${nemesis.name} (linearizability, ${servers.length === 1 ? '1 server' : `${servers.length} servers`})`;
    const durationMs = lockDurationOf(run);
    log(`${label}: ${Math.round(durationMs / 1000)} s`);
    const result = await runLockSegment(topology, servers, {
      ...lockContention(options),
      ttlMs: options.ttlMs,
      nemesis,
      durationMs,
      dir: join(run.historyDir, backend, `lin-${nemesis.name}`),
      log,
    });
    const expected = result.check.violations
      ? (expectedLinearizabilityReason({
          capabilities: server.capabilities,
          nemesis: nemesis.name,
        }) ?? null)
      : undefined;
    reports.push({
      ...result,
      kind: server.kind,
      capabilities: server.capabilities,
      expected,
      unexpected: expected === null ? result.check.violations : 0,
    });
    const { check } = result;
    log(
      `${label}: ${check.ops} ops (${check.unknown} unknown) on ${check.names.length} names; ${check.violations} not linearizable${expected ? ' (expected)' : ''}, ${check.inconclusive} inconclusive`,
    );
  }
}

function lockDurationOf({ backend, options }: BackendRun): number {
  return options.lockDurationsMs?.[backend] ?? options.lockDurationMs ?? 6_000;
}

function lockContention(
  options: CampaignOptions,
): Pick<LockSegmentOptions, 'connections' | 'names' | 'thinkMs'> {
  return {
    ...(options.lockConnections ? { connections: options.lockConnections } : {}),
    ...(options.lockNames ? { names: options.lockNames } : {}),
    ...(options.lockThinkMs === undefined ? {} : { thinkMs: options.lockThinkMs }),
  };
}

/** A planted negative control's outcome: the property's violations on the planted server. */
export interface ControlReport {
  backend: string;
  detected: boolean;
  violations: number;
}

/** The lock-delay the lock-delay segments ask for, in TTLs: longer than most client pauses. */
const LOCK_DELAY_TTLS = 3;

/**
 * Segments that hold one property to the real server and catch it on a planted one: client
 * pauses while every exclusive acquire asks for `workload`.
 */
interface ControlSegments {
  /** Names the segments: `lock-delay`, `hold cap`. */
  label: string;
  property: 'S9' | 'S10';
  /** The planted server: its backend ignores what `workload` asks for. */
  plant: Plant['kind'];
  workload: Pick<WorkloadOptions, 'lockDelayMs' | 'maxHoldMs'>;
}

/** The lock-delay segments (`CampaignOptions.lockDelayControl`): a lock-delay of 3 TTLs. */
const lockDelaySegments = (ttlMs: number): ControlSegments => ({
  label: 'lock-delay',
  property: 'S9',
  plant: 'no-lock-delay',
  workload: { lockDelayMs: LOCK_DELAY_TTLS * ttlMs },
});

/** The hold-cap segments (`CampaignOptions.holdCapControl`): a cap of one TTL. */
const holdCapSegments = (ttlMs: number): ControlSegments => ({
  label: 'hold cap',
  property: 'S10',
  plant: 'no-hold-cap',
  workload: { maxHoldMs: ttlMs },
});

/**
 * Runs `control`'s segments: on the real server (its report joins `reports`: the property there
 * is a failure) and on a planted server whose backend ignores the workload's ask (kept out of
 * `reports`: the property there is the control's detection).
 */
async function runControlSegments(
  run: BackendRun,
  reports: SegmentReport[],
  control: ControlSegments,
): Promise<ControlReport> {
  const { backend, topology, server, options, log } = run;
  const { label, property } = control;
  const durationMs = options.durationsMs?.[backend] ?? options.durationMs;
  const segment = (on: Topology, over: DlmServer, name: string) => {
    log(`${backend} × client-pause (${name}): ${Math.round(durationMs / 1000)} s`);
    return runSegment(on, over, {
      ...options,
      ...control.workload,
      durationMs,
      nemesis: nemesisNamed('client-pause')!,
      dir: join(run.historyDir, backend, `client-pause-${name.replaceAll(/[^a-z]+/g, '-')}`),
      log,
    });
  };
  const real = annotate(await segment(topology, server, label), server, false);
  reports.push(real);
  log(`${backend} × client-pause (${label}): ${property}=${real.check.counts[property]}`);
  // A topology of its own: an embedded server's data dir admits one server.
  const own = await startTopology(backend);
  let planted: DlmServer | undefined;
  try {
    planted = await startDlmServer(own, { kind: control.plant, pauseMs: 0 });
    const { check } = await segment(own, planted, `${label}, planted: ignored`);
    const violations = check.counts[property];
    log(
      `${backend} × client-pause (${label} ignored, planted): ${property}=${violations}: ${violations ? 'detected' : 'NOT DETECTED'}`,
    );
    return { backend, detected: violations > 0, violations };
  } finally {
    await planted?.process.kill().catch(() => {});
    await own.stop().catch(() => {});
  }
}

/** The planted grant's pause between its token and its write (planted-early-token.ts). */
const PLANTED_PAUSE_MS = 50;

/**
 * The linearizability negative control on a PostgreSQL topology: two servers with the planted
 * backend, the lock segment's workload without faults, for as long as the backend's lock
 * segments run. The checker must flag it.
 */
async function runLinNegativeControl(run: BackendRun): Promise<LinControlReport> {
  const { backend, topology, options, log } = run;
  const durationMs = lockDurationOf(run);
  const plant = { kind: 'early-token', pauseMs: PLANTED_PAUSE_MS } as const;
  const label = `${backend} × none (linearizability, planted: token before the row lock)`;
  log(`${label}: ${Math.round(durationMs / 1000)} s`);
  const servers = [await startDlmServer(topology, plant), await startDlmServer(topology, plant)];
  try {
    const { check } = await runLockSegment(topology, servers, {
      ...lockContention(options),
      ttlMs: options.ttlMs,
      nemesis: nemesisNamed('none')!,
      durationMs,
      dir: join(run.historyDir, backend, 'lin-planted-early-token'),
      log,
    });
    const flagged = check.names.find((name) => name.verdict === 'not-linearizable');
    log(
      `${label}: ${check.ops} ops on ${check.names.length} names; ${check.violations} not linearizable: ${check.violations ? 'detected' : 'NOT DETECTED'}`,
    );
    return {
      backend,
      detected: check.violations > 0,
      violations: check.violations,
      ops: check.ops,
      durationMs,
      example: flagged?.message,
    };
  } finally {
    for (const server of servers) await server.process.kill().catch(() => {});
  }
}

/**
 * The shared-mode segments (semaphore and read-write side by side), gated on what the server
 * declares: a backend without `sharedModes` cannot grant them, and one with best-effort fencing
 * promises no holder count (its S7 violations would all be expected). Returns why it skipped.
 */
async function runSharedSegments(
  run: BackendRun,
  nemeses: Nemesis[],
  reports: SegmentReport[],
): Promise<string | undefined> {
  const { backend, topology, server, options, log } = run;
  const { capabilities } = server;
  const why = !capabilities.sharedModes
    ? 'the backend does not declare sharedModes'
    : capabilities.fencing !== 'strict'
      ? 'best-effort fencing (no holder count is promised)'
      : undefined;
  if (why) {
    log(`${backend}: semaphore and read-write workloads skipped: ${why}`);
    return `${backend}: ${why}`;
  }
  for (const nemesis of nemeses) {
    const label = `${backend} × ${nemesis.name} (semaphore + read-write)`;
    const durationMs = options.sharedDurationMs ?? 6_000;
    log(`${label}: ${Math.round(durationMs / 1000)} s`);
    const results = await runSharedSegment(topology, server, {
      ...options,
      durationMs,
      nemesis,
      fencing: options.fencing,
      dir: join(run.historyDir, backend, `shared-${nemesis.name}`),
      log,
    });
    for (const result of results) {
      const report = annotate(result, server, false);
      reports.push(report);
      const shown = PROPERTIES.filter((p) => report.check.counts[p])
        .map((p) => `${p}=${report.check.counts[p]}${report.expected[p] ? ' (expected)' : ''}`)
        .join(' ');
      log(
        `${label}: ${result.workload}: ${report.check.stats.ops} ops, ${report.check.stats.grants} grants, ${report.check.stats.faults} faults; ${shown || 'no violations'}`,
      );
    }
  }
  return undefined;
}

function nemesesNamed(names: string[]): Nemesis[] {
  return names.map((name) => {
    const nemesis = nemesisNamed(name);
    if (!nemesis) throw new Error(`unknown nemesis ${JSON.stringify(name)}`);
    return nemesis;
  });
}

/**
 * Runs every planned (backend, nemesis) segment: per backend, its processes and one dlm
 * server are started once and shared by its segments; each segment has fresh lock names,
 * resource and workers.
 */
/** What one backend's run adds to the campaign's report. */
interface BackendOutcome {
  segments: SegmentReport[];
  lockSegments: LockSegmentReport[];
  errors: string[];
  sharedSkipped: string[];
  linNegativeControl?: LinControlReport;
  lockDelayControl?: ControlReport;
  holdCapControl?: ControlReport;
}

/** The backend's segments, on its own topology and servers (stopped at the end, also on failure). */
async function runBackend(
  backend: BackendVariant,
  first: boolean,
  plans: { lock: string[]; shared: string[] },
  options: CampaignOptions,
  historyDir: string,
  log: (line: string) => void,
): Promise<BackendOutcome> {
  const outcome: BackendOutcome = { segments: [], lockSegments: [], errors: [], sharedSkipped: [] };
  const nemeses = planFor(backend, options).filter((nemesis) => {
    if (nemesis.appliesTo(backend)) return true;
    log(`${backend}: ${nemesis.name} does not apply, skipped`);
    return false;
  });
  const lockNemeses = nemesesNamed(plans.lock);
  const sharedNemeses = nemesesNamed(plans.shared);
  const linControl = options.linNegativeControl === true && backend === 'postgres';
  // The negative control and the lock-delay and hold-cap segments run on the campaign's first backend.
  const control = options.negativeControl && first;
  const delayControl = options.lockDelayControl === true && first;
  const capControl = options.holdCapControl === true && first;
  const planned = nemeses.length || lockNemeses.length || sharedNemeses.length;
  if (!planned && !control && !linControl && !delayControl && !capControl) return outcome;
  log(`${backend}: starting`);
  let topology: Topology | undefined;
  let server: DlmServer | undefined;
  let second: DlmServer | undefined;
  try {
    topology = await startTopology(backend);
    server = await startDlmServer(topology);
    const run: BackendRun = { backend, topology, server, historyDir, options, log };
    await runFencedSegments(run, nemeses, control, outcome.segments);
    if (lockNemeses.length) {
      // Two servers on one shared backend; two embedded servers would be two lock spaces.
      const servers = [server];
      if (backend !== 'embedded') {
        second = await startDlmServer(topology);
        servers.push(second);
      }
      await runLockSegments(run, servers, lockNemeses, outcome.lockSegments);
    }
    if (linControl) {
      outcome.linNegativeControl = await runLinNegativeControl(run);
    }
    if (delayControl && server.capabilities.lockDelay) {
      const segments = lockDelaySegments(options.ttlMs);
      outcome.lockDelayControl = await runControlSegments(run, outcome.segments, segments);
    }
    if (capControl && server.capabilities.maxHold) {
      const segments = holdCapSegments(options.ttlMs);
      outcome.holdCapControl = await runControlSegments(run, outcome.segments, segments);
    }
    // Last: a failure here (no shared grant at all) leaves the other segments' reports whole.
    if (sharedNemeses.length) {
      const skipped = await runSharedSegments(run, sharedNemeses, outcome.segments);
      if (skipped) outcome.sharedSkipped.push(skipped);
    }
  } catch (error) {
    outcome.errors.push(`${backend}: ${(error as Error).stack ?? String(error)}`);
    log(`${backend}: FAILED: ${(error as Error).message}`);
  } finally {
    await server?.process.kill().catch(() => {});
    await second?.process.kill().catch(() => {});
    await topology?.stop().catch(() => {});
  }
  return outcome;
}

/**
 * Runs `work` over `items`, at most `lanes` at a time, and returns the results in the items'
 * order. A backend's segments mostly wait (on faults, TTLs and restarts), so backends in lanes
 * side by side finish the campaign sooner; each has its own services on its own ports.
 */
export async function inLanes<T, R>(
  items: readonly T[],
  lanes: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  async function lane(): Promise<void> {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T, index);
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(lanes, items.length)) }, lane));
  return results;
}

export async function runCampaign(options: CampaignOptions): Promise<CampaignResult> {
  const log = options.log ?? (() => {});
  const startedAt = new Date().toISOString();
  const historyDir = options.historyDir ?? tempDir('faults-history');
  const plan: Record<string, string[]> = {};
  const lockPlan: Record<string, string[]> = {};
  const sharedPlan: Record<string, string[]> = {};
  for (const backend of options.backends) {
    sharedPlan[backend] = (options.sharedNemeses?.(backend) ?? []).filter((name) =>
      nemesisNamed(name)?.appliesTo(backend),
    );
    plan[backend] = planFor(backend, options)
      .filter((nemesis) => nemesis.appliesTo(backend))
      .map((nemesis) => nemesis.name);
    lockPlan[backend] = options.lockNemeses?.(backend) ?? [];
  }

  const outcomes = await inLanes(options.backends, options.lanes ?? 1, (backend, index) =>
    runBackend(
      backend,
      index === 0,
      { lock: lockPlan[backend] ?? [], shared: sharedPlan[backend] ?? [] },
      options,
      historyDir,
      log,
    ),
  );
  const segments = outcomes.flatMap((outcome) => outcome.segments);
  const lockSegments = outcomes.flatMap((outcome) => outcome.lockSegments);
  const errors = outcomes.flatMap((outcome) => outcome.errors);
  const sharedSkipped = outcomes.flatMap((outcome) => outcome.sharedSkipped);
  const lockDelayControl = outcomes.find((outcome) => outcome.lockDelayControl)?.lockDelayControl;
  const holdCapControl = outcomes.find((outcome) => outcome.holdCapControl)?.holdCapControl;
  const linNegativeControl = outcomes.find(
    (outcome) => outcome.linNegativeControl,
  )?.linNegativeControl;

  const controlSegment = segments.find((segment) => segment.negativeControl);
  const negativeControl = options.negativeControl
    ? {
        run: controlSegment !== undefined,
        detected: (controlSegment?.check.counts.S3 ?? 0) > 0,
        lostUpdates: controlSegment?.check.counts.S3 ?? 0,
      }
    : undefined;
  const {
    nemeses: _nemeses,
    lockNemeses: _lockNemeses,
    sharedNemeses: _sharedNemeses,
    log: _log,
    ...rest
  } = options;
  return {
    startedAt,
    finishedAt: new Date().toISOString(),
    options: { ...rest, historyDir, plan, lockPlan, sharedPlan },
    segments,
    lockSegments,
    errors,
    sharedSkipped,
    negativeControl,
    linNegativeControl,
    lockDelayControl,
    holdCapControl,
    passed:
      errors.length === 0 &&
      segments.every((segment) => segment.unexpected === 0) &&
      lockSegments.every((segment) => segment.unexpected === 0) &&
      (negativeControl === undefined || negativeControl.detected) &&
      (linNegativeControl === undefined || linNegativeControl.detected) &&
      (!options.lockDelayControl || lockDelayControl?.detected === true) &&
      (!options.holdCapControl || holdCapControl?.detected === true),
  };
}
