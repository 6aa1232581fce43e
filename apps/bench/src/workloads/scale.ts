import { dlmLocker } from '../lockers/dlm.js';
import { sleep } from '../lockers/locker.js';
import { openFileLimits } from '../machine.js';
import { startServerProcess } from '../server-process.js';
import { createSamples, type LatencySummary } from '../stats.js';
import { type RecoveryResult, runRecovery } from './scale-recovery.js';
import {
  acquireOnWorkers,
  connectWorkers,
  embeddedServerArgs,
  killWorkers,
  MiB,
  residentBytes,
  type ScaleWorker,
  startWorkers,
  withTimeout,
} from './scale-workers.js';

export interface ScaleOptions {
  sessions: number;
  locks: number;
  /** Locks held when the first latency probe runs ("at 1k"). */
  probeAtLocks: number;
  /** Sequential acquire+release pairs per probe. */
  probeCount: number;
  /** Sessions per client process. */
  sessionsPerWorker: number;
  /**
   * How long the server is left alone before each RSS reading. Right after a burst of
   * allocations the RSS holds garbage V8 has not collected yet (more of it the busier the
   * machine); after several quiet seconds V8's memory reducer has run its GCs.
   */
  settleMs: number;
  /** Bound on each phase (connecting, acquiring, probing, recovering). */
  phaseTimeoutMs: number;
  /** Locks held on a data-dir server before its `kill -9` and restart; 0 skips the step. */
  recoveryLocks: number;
  profileDir?: string | undefined;
}

export interface ScaleResult {
  sessions: number;
  locks: number;
  probeAtLocks: number;
  workers: number;
  /** Server RSS (MiB): started, after the sessions connected, at the probe point, at the end. */
  rssMiB: { idle: number; sessions: number; atProbe: number; full: number };
  perSessionKiB: number;
  perLockBytes: number;
  acquireAtProbe: LatencySummary;
  acquireAtFull: LatencySummary;
  /** p99 at all locks ÷ p99 at `probeAtLocks`. */
  p99Ratio: number;
  connectMs: number;
  acquireMs: number;
  /**
   * With a data dir: from the restart after `kill -9` with `recovery.locks` held until the
   * first `lock.get` of a held name answered it held with its token. Absent when skipped.
   */
  recoveryMs?: number;
  recovery?: RecoveryResult;
  errors: number;
  notes: string[];
}

async function probe(url: string, prefix: string, count: number): Promise<LatencySummary> {
  const locker = await dlmLocker(url, 0);
  const samples = createSamples();
  try {
    // Untimed pairs first: the server's code paths for this client warm up (JIT) before timing.
    const warmup = Math.min(200, count);
    for (let i = 0; i < count + warmup; i++) {
      const t0 = performance.now();
      const held = await locker.acquire(`${prefix}:${i}`, { ttlMs: 60_000, waitMs: 0 });
      if (i >= warmup) samples.push(performance.now() - t0);
      await held.release();
    }
  } finally {
    await locker.close();
  }
  return samples.summary();
}

/**
 * How many sessions the open-file limits allow (the server needs a descriptor per session), and
 * the `ulimit -n` to give the server. The hard limit cannot be raised from here.
 */
function sessionsAllowed(wanted: number, notes: string[]) {
  const limits = openFileLimits();
  const needed = wanted + 512;
  if (limits.soft >= needed) return { sessions: wanted, openFiles: undefined, limits };
  if (limits.hard >= needed) return { sessions: wanted, openFiles: needed, limits };
  const sessions = Math.max(1, limits.hard - 512);
  notes.push(`open-file hard limit ${limits.hard} allows only ${sessions} of ${wanted} sessions`);
  return { sessions, openFiles: limits.hard, limits };
}

/** The in-memory server for `sessions` connections, and its RSS once started. */
async function startScaleServer(
  sessions: number,
  openFiles: number | undefined,
  options: ScaleOptions,
) {
  return startServerProcess({
    backendArgs: embeddedServerArgs(null, sessions),
    openFiles,
    profileDir: options.profileDir,
    profileName: 'dlm-embedded-scale',
  });
}

interface Phases {
  server: { url: string; pid: number };
  workers: ScaleWorker[];
  prefix: string;
  options: ScaleOptions;
  errors: number;
  notes: string[];
}

/** The workers acquire `count` more locks; failures are counted, not thrown. */
async function acquirePhase(phases: Phases, count: number): Promise<number> {
  const t0 = performance.now();
  const { workers, prefix, options } = phases;
  const result = await acquireOnWorkers(
    workers,
    { count, prefix, ttlMs: 600_000 },
    options.phaseTimeoutMs,
  );
  phases.errors += result.errors;
  phases.notes.push(...result.notes);
  return performance.now() - t0;
}

/** After `settleMs`: the server's RSS, then the probe's acquire latencies. */
async function measurePhase(phases: Phases, what: string, suffix: string) {
  await sleep(phases.options.settleMs);
  const { server, prefix, options } = phases;
  const rss = residentBytes(server.pid);
  const probeRun = probe(server.url, `${prefix}:${suffix}`, options.probeCount);
  return { rss, latency: await withTimeout(what, options.phaseTimeoutMs, probeRun) };
}

/** Connects the sessions, then holds the locks in two steps with a measurement after each. */
async function runPhases(phases: Phases, sessions: number, idle: number) {
  const { server, workers, options } = phases;
  const connectStart = performance.now();
  const connected = await connectWorkers(workers, server.url, options.phaseTimeoutMs);
  const connectMs = performance.now() - connectStart;
  phases.errors += connected.errors;
  phases.notes.push(...connected.notes);
  await sleep(options.settleMs);
  const rssSessions = residentBytes(server.pid);
  const locks = Math.max(options.locks, options.probeAtLocks);
  let acquireMs = await acquirePhase(phases, options.probeAtLocks);
  const atProbe = await measurePhase(phases, 'the first probe', 'p1');
  acquireMs += await acquirePhase(phases, locks - options.probeAtLocks);
  const full = await measurePhase(phases, 'the second probe', 'p2');
  return {
    sessions,
    locks,
    probeAtLocks: options.probeAtLocks,
    workers: workers.length,
    rssMiB: {
      idle: idle / MiB,
      sessions: rssSessions / MiB,
      atProbe: atProbe.rss / MiB,
      full: full.rss / MiB,
    },
    perSessionKiB: (rssSessions - idle) / sessions / 1024,
    perLockBytes: (full.rss - rssSessions) / locks,
    acquireAtProbe: atProbe.latency,
    acquireAtFull: full.latency,
    p99Ratio: full.latency.p99 / atProbe.latency.p99,
    connectMs,
    acquireMs,
  };
}

/**
 * Workload 4: one embedded (in-memory) dlm server process with `sessions` WebSocket sessions
 * holding `locks` locks between them. Resident memory comes from the server process's VmRSS;
 * latency from a separate probe client doing sequential acquire+release on fresh names, once
 * with `probeAtLocks` held and once with all of them. Then, unless `recoveryLocks` is 0, the
 * recovery step (`scale-recovery.ts`) on a data-dir server.
 */
export async function runScale(prefix: string, options: ScaleOptions): Promise<ScaleResult> {
  const notes: string[] = [];
  const { sessions, openFiles, limits } = sessionsAllowed(options.sessions, notes);
  const perWorker = Math.min(options.sessionsPerWorker, Math.max(1, limits.soft - 256));
  const server = await startScaleServer(sessions, openFiles, options);
  let workers: ScaleWorker[] = [];
  let measured: Awaited<ReturnType<typeof runPhases>>;
  const phases: Phases = { server, workers, prefix, options, errors: 0, notes };
  try {
    await sleep(Math.min(500, options.settleMs));
    const idle = residentBytes(server.pid);
    workers = startWorkers(sessions, perWorker);
    phases.workers = workers;
    measured = await runPhases(phases, sessions, idle);
  } finally {
    // The server first: closing tens of thousands of clients one by one would keep it busy.
    await server.stop();
    killWorkers(workers);
  }
  const result: ScaleResult = { ...measured, errors: phases.errors, notes };
  if (options.recoveryLocks > 0) {
    const recovery = await runRecovery(`${prefix}:recovery`, {
      locks: options.recoveryLocks,
      sessions: Math.min(sessions, 2_000),
      sessionsPerWorker: Math.min(perWorker, 1_000),
      settleMs: options.settleMs,
      phaseTimeoutMs: options.phaseTimeoutMs,
    });
    result.recovery = recovery;
    result.recoveryMs = recovery.recoveryMs;
    result.errors += recovery.errors;
    notes.push(...recovery.notes);
  }
  return result;
}
