#!/usr/bin/env node
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { usageFailure } from '@dlm/flags';
import {
  combineFloors,
  type FloorBackend,
  type FloorFigures,
  type FloorResult,
  measureFloor,
} from './floors.js';
import { checkIssue21, renderFloors } from './issue-21.js';
import { checkIssue29 } from './issue-29.js';
import type { Target } from './lockers/locker.js';
import { machineInfo, packageVersions, serviceVersions } from './machine.js';
import { combine, type Metrics, metricsOf, type TargetRun } from './metrics.js';
import { type BenchOptions, parseOptions, USAGE, UsageError, type Workload } from './options.js';
import {
  CPU_COLUMNS,
  checkTargets,
  formatMs,
  renderChecks,
  renderMarkdown,
  renderScale,
  renderText,
  sharedTableRows,
  type TargetFigures,
  tableRows,
} from './report.js';
import {
  createTargets,
  floorsOf,
  type Services,
  selectSpecs,
  startServices,
  stopServices,
  TARGET_IDS,
} from './targets.js';
import { runContention } from './workloads/contention.js';
import { runScale, type ScaleResult } from './workloads/scale.js';
import {
  probeSharedModes,
  READ_FRACTION,
  runSharedModes,
  SEMAPHORE_LIMIT,
} from './workloads/shared-modes.js';
import { runThroughput } from './workloads/throughput.js';
import { runUncontended } from './workloads/uncontended.js';

const log = (line: string) => process.stderr.write(`${line}\n`);
const seconds = (ms: number) => `${(ms / 1_000).toFixed(1)} s`;

async function runTarget(
  target: Target,
  options: BenchOptions,
  prefix: string,
): Promise<TargetRun> {
  const run: TargetRun = {};
  const running = await target.start();
  const wants = (workload: Workload) =>
    options.workloads.includes(workload) &&
    (target.onlyWorkloads === undefined || target.onlyWorkloads.includes(workload));
  try {
    const ttlMs = options.ttlMs;
    if (wants('uncontended')) {
      run.uncontended = await runUncontended(running, prefix, { ...options.uncontended, ttlMs });
    }
    if (wants('throughput')) {
      run.throughput = await runThroughput(
        running,
        prefix,
        { ...options.throughput, ttlMs },
        { server: running.serverPid, backend: target.backendPids?.() ?? [] },
      );
    }
    if (wants('shared')) {
      run.shared = await runThroughput(
        running,
        `${prefix}:shared`,
        { ...options.throughput, ttlMs, shared: true },
        { server: running.serverPid, backend: target.backendPids?.() ?? [] },
      );
    }
    if (wants('contention')) {
      run.contention = await runContention(running, prefix, { ...options.contention, ttlMs });
    }
    const shared = (['semaphore', 'read-write'] as const).filter(wants);
    if (shared.length) {
      // A peer offers what its library has; a dlm target what its backend declares, found out
      // end to end (a backend without `sharedModes` refuses a shared acquire).
      const refused =
        target.kind === 'dlm' ? await probeSharedModes(running, `${prefix}:probe`) : null;
      const offered =
        target.kind === 'peer'
          ? shared.filter((workload) => target.sharedWorkloads?.includes(workload))
          : refused === null
            ? shared
            : [];
      if (refused !== null) run.sharedSkipped = refused;
      for (const workload of offered) {
        const result = await runSharedModes(running, prefix, workload, {
          ...options.sharedModes,
          ttlMs,
        });
        if (workload === 'semaphore') run.semaphore = result;
        else run.readWrite = result;
      }
    }
  } catch (error) {
    run.error = error instanceof Error ? error.message : String(error);
  } finally {
    await running.stop();
  }
  return run;
}

function describeRun(run: TargetRun): string {
  const parts: string[] = [];
  const f = (v: number) => (Number.isFinite(v) ? v.toFixed(3) : '–');
  if (run.uncontended) parts.push(`acq p50 ${f(run.uncontended.acquire.p50)} ms`);
  if (run.throughput) {
    const cpu = run.throughput.cpuUsPerPair;
    const us = (v: number) => (Number.isFinite(v) ? Math.round(v).toString() : '–');
    parts.push(
      `${Math.round(run.throughput.pairsPerSecond)} pairs/s (CPU µs/pair: client ${us(cpu.client)}, server ${us(cpu.server)}, services ${us(cpu.backend)})`,
    );
  }
  if (run.shared) {
    parts.push(`shared client: ${Math.round(run.shared.pairsPerSecond)} pairs/s`);
  }
  if (run.contention) {
    parts.push(
      `${Math.round(run.contention.handoffsPerSecond)} handoffs/s, fairness ${run.contention.fairness.toFixed(2)}, violations ${run.contention.violations}`,
    );
  }
  if (run.semaphore) {
    parts.push(
      `semaphore(4): ${Math.round(run.semaphore.grantsPerSecond)} grants/s, max ${run.semaphore.maxHolders} holders, violations ${run.semaphore.violations}`,
    );
  }
  if (run.readWrite) {
    parts.push(
      `read-write: ${Math.round(run.readWrite.grantsPerSecond)} grants/s (${run.readWrite.writes?.grants ?? 0} writes), violations ${run.readWrite.violations}`,
    );
  }
  if (run.sharedSkipped) parts.push(`semaphore and read-write skipped: ${run.sharedSkipped}`);
  if (run.error) parts.push(`ERROR ${run.error}`);
  return parts.join('; ');
}

/** The command as a reader would type it (where the files went is not part of it). */
function shownCommand(argv: string[]): string {
  const shown = argv.filter((arg, i) => arg !== '--out' && argv[i - 1] !== '--out');
  return ['pnpm bench', ...shown].join(' ');
}

/** The commit measured, with `+changes` when the working tree differs from it. */
function gitCommit(): string {
  const run = (args: string[]) =>
    spawnSync('git', args, { cwd: fileURLToPath(new URL('.', import.meta.url)), encoding: 'utf8' });
  const head = run(['rev-parse', '--short', 'HEAD']).stdout.trim();
  if (!head) return 'unknown';
  const dirty = run(['status', '--porcelain', '--untracked-files=no']).stdout.trim() !== '';
  return dirty ? `${head}+changes` : head;
}

interface Results {
  mode: 'full' | 'smoke';
  command: string;
  /** `git rev-parse --short HEAD`, `+changes` when the tree had uncommitted changes. */
  commit: string;
  startedAt: string;
  durationSeconds: number;
  machine: ReturnType<typeof machineInfo> & { loadAverageAtEnd: number[] };
  versions: { packages: Record<string, string>; services: Record<string, string> };
  settings: Omit<BenchOptions, 'outDir' | 'profileDir'>;
  targets: Record<string, { label: string; kind: string; median: Metrics; runs: TargetRun[] }>;
  scale?: ScaleResult | { error: string };
  /** Issue 21's backend floors: medians and every round's result. */
  floors: Partial<Record<FloorBackend, { median: FloorFigures; runs: FloorResult[] }>>;
  checks: ReturnType<typeof checkTargets>;
  checksIssue21: ReturnType<typeof checkIssue21>;
  checksIssue29: ReturnType<typeof checkIssue29>;
}

function loadNote(machine: Results['machine']): string {
  const busy = Math.max(machine.loadAverage[0] ?? 0, machine.loadAverageAtEnd[0] ?? 0);
  return busy > machine.cores * 0.5
    ? `**Measured on a shared, loaded machine**: the 1-minute load average was ${machine.loadAverage[0]} at the start and ${machine.loadAverageAtEnd[0]} at the end, on ${machine.cores} cores (other jobs were running). Absolute figures are noisy and pessimistic; the ratios, measured in the same run, are the more meaningful part.`
    : `Load average ${machine.loadAverage.join(' / ')} at the start and ${machine.loadAverageAtEnd.join(' / ')} at the end (1/5/15 min), on ${machine.cores} cores.`;
}

function markdown(
  results: Results,
  rows: string[][],
  cpuRows: string[][],
  sharedRows: string[][],
  floorsTable: string,
): string {
  const m = results.machine;
  const s = results.settings;
  const scale = results.scale;
  return `# dlm benchmark results

Written by \`${results.command}\` (apps/bench) at commit ${results.commit} on ${results.startedAt}, ${results.mode} run, ${results.durationSeconds.toFixed(0)} s.
Regenerate with \`pnpm bench\` from the repository root.

## Machine

- CPU: ${m.cpuModel}, ${m.cores} cores; memory ${m.memoryGiB} GiB; ${m.platform}
- Node ${m.node}
- ${loadNote(m)}
- Services (all on loopback, started by @dlm/test-services): ${Object.entries(
    results.versions.services,
  )
    .map(([name, version]) => `${name} ${version}`)
    .join(', ')}
- Packages: ${Object.entries(results.versions.packages)
    .map(([name, version]) => `${name} ${version}`)
    .join(', ')}

## Settings

${s.repeat} round(s) of workloads 1–3, 5 and the floors, interleaved (each round runs every target once, in table order), medians shown (violations, errors: sums).
1 uncontended: ${s.uncontended.count} sequential acquire+release on fresh names after ${s.uncontended.warmup} untimed.
2 throughput: ${s.throughput.clients} clients, each on its own lock, ${s.throughput.durationMs} ms measured after ${s.throughput.warmupMs} ms run-in.
5 shared client: workload 2's ${s.throughput.clients} callers over ONE client (one \`createClient\`, one peer session), as a service with one client per process runs them.
3 contention: ${s.contention.clients} clients on one lock, wait ≤ ${s.contention.waitMs} ms, hold ${s.contention.holdMs === 0 ? 'one event-loop turn' : `${s.contention.holdMs} ms`}, ${s.contention.durationMs} ms measured.
Lease ${s.ttlMs} ms. Polling peers (raw Redis, redlock, redis-semaphore, etcd3 Lock) retry every ${s.pollMs} ms.
Every dlm target is a separate server process (\`apps/server/dist/main.js\`) driven by @dlm/client over WebSocket, one connection per simulated client; every "dlm lib" target is \`@dlm/core\`'s \`createLockService\` over its adapter in the benchmark's process (a service and its own adapter connections per simulated client; in workload 5 one for all 32 callers); every peer client has its own connection(s).

## Workloads 1–3 and 5

Latencies in ms. Ratios are dlm ÷ peer: below 1 is better for ↓ columns, above 1 for ↑ columns.

${renderMarkdown(rows)}

Columns: **1** uncontended (acquire and release latency), **2** throughput (${s.throughput.clients} clients on their own locks: acquire+release pairs per second, pair and acquire latency), **5** shared client (workload 2's ${s.throughput.clients} callers over one client: pairs per second, pair latency), **3** contention (${s.contention.clients} clients on one lock: grants/s, handoffs/s = grants to another client than the previous holder, handoff latency = previous holder's release call → next grant, fairness = smallest client's share of grants ÷ an equal share, violations = grants while another client held the lock). Errors: failed operations (not counting waits that ran out).

### Where the CPU went (workload 2)

CPU time per acquire+release pair in the measured window, from /proc (10 ms ticks): the benchmark process (all clients), the dlm server process, and the services (redis-server, etcd, ZooKeeper). On a shared machine these are the steadier figures: they do not count time spent waiting for a core.

${renderMarkdown(cpuRows)}

## Workloads 6 and 7: shared modes

${s.sharedModes.clients} clients on one name, wait ≤ ${s.sharedModes.waitMs} ms, hold ${s.sharedModes.holdMs === 0 ? 'one event-loop turn' : `${s.sharedModes.holdMs} ms`}, ${s.sharedModes.durationMs} ms measured after ${s.sharedModes.warmupMs} ms. **6** semaphore: every acquire a permit of ${SEMAPHORE_LIMIT} (\`mode: 'shared', limit: ${SEMAPHORE_LIMIT}\`), against redis-semaphore's \`Semaphore\`. **7** read-write lock: ${Math.round(READ_FRACTION * 100)}% reads (shared), the rest writes (exclusive), against a ZooKeeper read-write lock on node-zookeeper-client by Curator's algorithm (\`read-\`/\`write-\` sequence nodes; a reader waits on the last writer ahead of it, a writer on its predecessor). Acquire latency: from the call to the grant. Violations: a grant beyond the limit, a writer beside anyone, or a reader beside a writer. Run on every dlm target whose backend has \`sharedModes\` (a probe: two shared holders at once); ${skippedShared(results)}. Ratios dlm ÷ the column's peer.

${sharedRows.length > 1 ? renderMarkdown(sharedRows) : 'Not run.'}

## Workload 4: scale (embedded server, in memory; recovery on a data dir)

${
  scale === undefined
    ? 'Not run.'
    : 'error' in scale
      ? `Failed: ${scale.error}`
      : renderScale(scale)
          .map((line) => `- ${line}`)
          .join('\n')
}

## Backend floors (issue 21, target 4)

${floorsTable}

## Targets from issue 5

${renderChecks(results.checks, true)}

## Targets from issue 21

${renderChecks(results.checksIssue21, true)}

## Targets from issue 29

Ratios dlm ÷ peer from this run (medians of its interleaved rounds).

${renderChecks(results.checksIssue29, true)}
`;
}

/** Which dlm targets skipped workloads 6 and 7, for the report. */
function skippedShared(results: Results): string {
  const skipped = Object.entries(results.targets)
    .filter(([, target]) => target.runs.some((run) => run.sharedSkipped))
    .map(([id]) => `\`${id}\``);
  return skipped.length
    ? `skipped (no shared grants; why: \`sharedSkipped\` in latest.json): ${skipped.join(', ')}`
    : 'no dlm target skipped them';
}

/** The options, or the exit code of --help, --list or a usage error. */
function optionsOrExit(argv: string[]): BenchOptions | number {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(usageFailure('bench', error));
    return 2;
  }
  if ('help' in parsed) {
    process.stdout.write(USAGE);
    return 0;
  }
  if ('list' in parsed) {
    process.stdout.write(`${TARGET_IDS.join('\n')}\n`);
    return 0;
  }
  return parsed;
}

/** What one bench run measured. */
interface Measured {
  targets: Target[];
  runs: Map<string, TargetRun[]>;
  floors: Map<FloorBackend, FloorResult[]>;
  scale: ScaleResult | { error: string } | undefined;
  versions: Results['versions'];
}

/** One round of the floors, each after the other (they share the machine's cores). */
async function measureFloors(
  backends: FloorBackend[],
  services: Services,
  options: BenchOptions,
  runId: string,
  floors: Map<FloorBackend, FloorResult[]>,
  round: number,
): Promise<void> {
  for (const backend of backends) {
    const settings = { ...options.throughput, runId: `${runId}-${round}` };
    const result = await measureFloor(backend, services, settings).catch(
      (error: unknown): FloorResult => ({
        backend,
        clients: settings.clients,
        writes: 0,
        writesPerSecond: Number.NaN,
        latency: { count: 0, p50: Number.NaN, p99: Number.NaN, mean: Number.NaN, max: Number.NaN },
        errors: 1,
        firstError: error instanceof Error ? error.message : String(error),
      }),
    );
    floors.set(backend, [...(floors.get(backend) ?? []), result]);
    const { p50, p99 } = result.latency;
    log(
      `[${round}/${options.repeat}] floor ${backend.padEnd(15)} ${Math.round(result.writesPerSecond)} writes/s, p50 ${formatMs(p50)} ms, p99 ${formatMs(p99)} ms${result.firstError ? `; ERROR ${result.firstError}` : ''}`,
    );
  }
}

/**
 * Starts the services, runs `repeat` rounds of every target (interleaved: round 1 of every
 * target, then round 2…, so that a slow spell of the machine touches every target alike) and
 * of the floors, then the scale workload, and stops the services.
 */
async function measure(options: BenchOptions): Promise<Measured> {
  const specs = selectSpecs(options.only);
  const targetWorkloads = options.workloads.some((w) => w !== 'scale');
  const runId = randomBytes(4).toString('hex');
  log('bench: starting services…');
  const services = targetWorkloads ? await startServices(specs) : {};
  const versions = { packages: packageVersions(), services: await serviceVersions(services) };
  const runs = new Map<string, TargetRun[]>();
  const floors = new Map<FloorBackend, FloorResult[]>();
  const floorBackends = options.workloads.includes('floor') ? floorsOf(specs) : [];
  let targets: Target[] = [];
  let scale: ScaleResult | { error: string } | undefined;
  try {
    targets = targetWorkloads
      ? createTargets(specs, services, {
          pollMs: options.pollMs,
          profileDir: options.profileDir,
          runId,
        })
      : [];
    for (let repeat = 1; repeat <= options.repeat; repeat++) {
      for (const target of targets) {
        const t0 = performance.now();
        const run = await runTarget(target, options, `bench:${runId}:${target.id}:${repeat}`);
        runs.set(target.id, [...(runs.get(target.id) ?? []), run]);
        log(
          `[${repeat}/${options.repeat}] ${target.id.padEnd(21)} ${seconds(performance.now() - t0).padStart(6)}  ${describeRun(run)}`,
        );
      }
      await measureFloors(floorBackends, services, options, runId, floors, repeat);
    }
    if (options.workloads.includes('scale')) scale = await measureScale(options, runId);
  } finally {
    await stopServices(services);
  }
  return { targets, runs, floors, scale, versions };
}

async function measureScale(
  options: BenchOptions,
  runId: string,
): Promise<ScaleResult | { error: string }> {
  log(`bench: scale, ${options.scale.sessions} sessions and ${options.scale.locks} locks…`);
  try {
    const scale = await runScale(`bench:${runId}:scale`, {
      ...options.scale,
      profileDir: options.profileDir,
    });
    for (const line of renderScale(scale)) log(`  ${line}`);
    return scale;
  } catch (error) {
    const failed = { error: error instanceof Error ? error.message : String(error) };
    log(`  scale failed: ${failed.error}`);
    return failed;
  }
}

/** Why the run fails (and CI with it): a broken target, a violation, a failed scale run… */
function failures(
  options: BenchOptions,
  { targets, runs, floors, scale }: Measured,
  figures: Map<string, TargetFigures>,
): string[] {
  const failed = [...runs.values()].flat().some((run) => run.error !== undefined);
  const violations = [...figures.values()].some(
    (f) => f.metrics.contentionViolations > 0 || f.metrics.sharedModeViolations > 0,
  );
  const scaleFailed = scale !== undefined && ('error' in scale || scale.errors > 0);
  const floorFailed = [...floors.values()].flat().some((f) => f.errors > 0 || f.writes === 0);
  // Zero grants under contention is a broken wait for dlm; for a polling peer on a slow
  // machine a short window can legitimately end without one.
  const empty = targets.some((target) => {
    const m = figures.get(target.id)!.metrics;
    const ran = (workload: Workload) =>
      options.workloads.includes(workload) &&
      (target.onlyWorkloads === undefined || target.onlyWorkloads.includes(workload));
    return (
      (ran('throughput') && !(m.throughputPairsPerSecond > 0)) ||
      (ran('shared') && !(m.sharedPairsPerSecond > 0)) ||
      (target.kind === 'dlm' && ran('contention') && !(m.contentionGrantsPerSecond > 0)) ||
      // A workload that ran (not skipped for want of sharedModes) and granted nothing.
      m.semaphoreGrantsPerSecond === 0 ||
      m.readWriteGrantsPerSecond === 0
    );
  });
  return [
    failed && 'a target failed',
    violations && 'mutual-exclusion violations',
    scaleFailed && 'scale failed',
    floorFailed && 'a backend floor failed',
    empty && 'a workload completed nothing',
  ].filter((reason): reason is string => typeof reason === 'string');
}

/** The floors (medians over the rounds) and the targets of issues 21 and 29 held to them. */
function issue21Report(
  measured: Measured,
  figures: Map<string, TargetFigures>,
  scale: ScaleResult | undefined,
  clients: number,
) {
  const floors = new Map(
    [...measured.floors].map(([backend, runs]) => [backend, combineFloors(runs)]),
  );
  const json: Results['floors'] = Object.fromEntries(
    [...measured.floors].map(([backend, runs]) => [
      backend,
      { median: floors.get(backend)!, runs },
    ]),
  );
  return {
    floors,
    json,
    checks: checkIssue21(figures, floors, scale),
    checksIssue29: checkIssue29(figures, floors),
    table: renderFloors(floors, figures, clients),
  };
}

async function main(): Promise<number> {
  const options = optionsOrExit(process.argv.slice(2));
  if (typeof options === 'number') return options;
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const machine = machineInfo();
  log(
    `bench: ${machine.cpuModel}, ${machine.cores} cores, load ${machine.loadAverage.join(' ')}, node ${machine.node}`,
  );
  const measured = await measure(options);
  const { targets, runs, scale } = measured;

  const figures = new Map<string, TargetFigures>();
  for (const target of targets) {
    const targetRuns = runs.get(target.id) ?? [];
    figures.set(target.id, {
      id: target.id,
      label: target.label,
      metrics: combine(targetRuns.map(metricsOf)),
    });
  }
  const scaleResult = scale && !('error' in scale) ? scale : undefined;
  const checks = checkTargets(figures, scaleResult);
  const issue21 = issue21Report(measured, figures, scaleResult, options.throughput.clients);
  const rows = tableRows(figures);
  const cpuRows = tableRows(figures, CPU_COLUMNS);
  const sharedRows = sharedTableRows(figures);
  const results: Results = {
    mode: options.smoke ? 'smoke' : 'full',
    command: shownCommand(process.argv.slice(2)),
    commit: gitCommit(),
    startedAt,
    durationSeconds: (performance.now() - started) / 1_000,
    machine: { ...machine, loadAverageAtEnd: machineInfo().loadAverage },
    versions: measured.versions,
    settings: (({ outDir: _o, profileDir: _p, ...rest }) => rest)(options),
    targets: Object.fromEntries(
      targets.map((target) => [
        target.id,
        {
          label: target.label,
          kind: target.kind,
          median: figures.get(target.id)!.metrics,
          runs: runs.get(target.id) ?? [],
        },
      ]),
    ),
    ...(scale ? { scale } : {}),
    floors: issue21.json,
    checks,
    checksIssue21: issue21.checks,
    checksIssue29: issue21.checksIssue29,
  };
  if (targets.length) {
    process.stdout.write(`\n${renderText(rows)}\n`);
    process.stdout.write(
      'Latencies in ms; ratios dlm ÷ peer (↓ lower is better, ↑ higher is better).\n',
    );
    process.stdout.write(`\nCPU per pair in workload 2 (µs):\n${renderText(cpuRows)}\n`);
    if (sharedRows.length > 1) {
      process.stdout.write(
        `\nShared modes (6: semaphore of 4, 7: read-write 90% reads), ratios dlm ÷ the column's peer:\n${renderText(sharedRows)}\n`,
      );
    }
  }
  if (scaleResult) process.stdout.write(`\nScale: ${renderScale(scaleResult).join('\n       ')}\n`);
  if (issue21.floors.size) process.stdout.write(`\nBackend floors:\n${issue21.table}\n`);
  process.stdout.write(`\nTargets (issue 5):\n${renderChecks(checks, false)}\n`);
  process.stdout.write(`\nTargets (issue 21):\n${renderChecks(issue21.checks, false)}\n`);
  process.stdout.write(`\nTargets (issue 29):\n${renderChecks(issue21.checksIssue29, false)}\n`);

  const benchDir = fileURLToPath(new URL('..', import.meta.url));
  const outDir = options.outDir ?? join(benchDir, 'results', ...(options.smoke ? ['smoke'] : []));
  mkdirSync(outDir, { recursive: true });
  // bigint-free by construction; NaN (not measured) becomes null in JSON.
  writeFileSync(join(outDir, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(
    join(outDir, 'RESULTS.md'),
    markdown(results, rows, cpuRows, sharedRows, issue21.table),
  );
  log(
    `\nbench: wrote ${join(outDir, 'latest.json')} and RESULTS.md (${seconds(performance.now() - started)})`,
  );

  const reasons = failures(options, measured, figures);
  if (reasons.length) {
    log(`bench: FAILED (${reasons.join(', ')})`);
    return 1;
  }
  return 0;
}

process.on('SIGINT', () => process.exit(130));
process.on('SIGTERM', () => process.exit(143));
main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    log(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
