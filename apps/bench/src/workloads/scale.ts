import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dlmLocker } from '../lockers/dlm.js';
import { sleep } from '../lockers/locker.js';
import { openFileLimits } from '../machine.js';
import { startServerProcess } from '../server-process.js';
import { createSamples, type LatencySummary } from '../stats.js';
import type { FromWorker, ToWorker } from './scale-protocol.js';

export interface ScaleOptions {
  sessions: number;
  locks: number;
  /** Locks held when the first latency probe runs ("at 1k"). */
  probeAtLocks: number;
  /** Sequential acquire+release pairs per probe. */
  probeCount: number;
  /** Sessions per client process. */
  sessionsPerWorker: number;
  /** Bound on each phase (connecting, acquiring, probing). */
  phaseTimeoutMs: number;
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
  errors: number;
  notes: string[];
}

/** The resident set of a process, from /proc (Linux), in bytes. */
export function residentBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(match[1]) * 1024;
}

const MiB = 1024 * 1024;

function withTimeout<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`scale: ${what} took over ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

interface Worker {
  child: ChildProcess;
  sessions: number;
  request(message: ToWorker): Promise<FromWorker>;
}

function startWorker(sessions: number): Worker {
  const child = fork(new URL('../scale-worker.js', import.meta.url), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return {
    child,
    sessions,
    request(message) {
      return new Promise((resolve, reject) => {
        const onExit = (code: number | null) => reject(new Error(`scale worker exited (${code})`));
        child.once('exit', onExit);
        child.once('message', (reply: FromWorker) => {
          child.off('exit', onExit);
          resolve(reply);
        });
        child.send(message);
      });
    },
  };
}

/** Splits `total` into parts proportional to each worker's sessions. */
function split(total: number, workers: Worker[]): number[] {
  const sessions = workers.reduce((sum, worker) => sum + worker.sessions, 0);
  const parts = workers.map((worker) => Math.floor((total * worker.sessions) / sessions));
  parts[0]! += total - parts.reduce((sum, part) => sum + part, 0);
  return parts;
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
 * Workload 4: one embedded (in-memory) dlm server process with `sessions` WebSocket sessions
 * holding `locks` locks between them. Resident memory comes from the server process's VmRSS;
 * latency from a separate probe client doing sequential acquire+release on fresh names, once
 * with `probeAtLocks` held and once with all of them.
 */
export async function runScale(prefix: string, options: ScaleOptions): Promise<ScaleResult> {
  const notes: string[] = [];
  const limits = openFileLimits();
  const needed = options.sessions + 512;
  let openFiles: number | undefined;
  let sessions = options.sessions;
  if (limits.soft < needed) {
    if (limits.hard >= needed) openFiles = needed;
    else {
      sessions = Math.max(1, limits.hard - 512);
      notes.push(`open-file limit ${limits.hard} allows only ${sessions} sessions`);
    }
  }
  const perWorker = Math.min(options.sessionsPerWorker, Math.max(1, limits.soft - 256));
  const workerCount = Math.ceil(sessions / perWorker);
  const locks = Math.max(options.locks, options.probeAtLocks);

  // The server's per-address connection limit (1,000 by default) guards against one client
  // host taking every connection; here every session comes from 127.0.0.1 on purpose.
  const connectionLimit = String(sessions + 64);
  const server = await startServerProcess({
    backendArgs: [
      '--backend',
      'embedded',
      '--memory',
      '--max-connections-per-address',
      connectionLimit,
      '--max-connections',
      connectionLimit,
    ],
    openFiles,
    profileDir: options.profileDir,
    profileName: 'dlm-embedded-scale',
  });
  const workers: Worker[] = [];
  try {
    await sleep(500);
    const idle = residentBytes(server.pid);
    for (let i = 0; i < workerCount; i++) {
      const share = Math.min(perWorker, sessions - i * perWorker);
      workers.push(startWorker(share));
    }
    let errors = 0;
    const connectStart = performance.now();
    const connected = await withTimeout(
      'connecting the sessions',
      options.phaseTimeoutMs,
      Promise.all(
        workers.map((worker) =>
          worker.request({ type: 'connect', url: server.url, sessions: worker.sessions }),
        ),
      ),
    );
    const connectMs = performance.now() - connectStart;
    for (const reply of connected) {
      errors += reply.failed;
      if (reply.error) notes.push(`connect: ${reply.error}`);
    }
    await sleep(1_000);
    const rssSessions = residentBytes(server.pid);

    const acquire = async (count: number, what: string) => {
      const replies = await withTimeout(
        what,
        options.phaseTimeoutMs,
        Promise.all(
          split(count, workers).map((part, i) =>
            workers[i]!.request({ type: 'acquire', count: part, ttlMs: 600_000, prefix }),
          ),
        ),
      );
      for (const reply of replies) {
        errors += reply.failed;
        if (reply.error) notes.push(`${what}: ${reply.error}`);
      }
    };

    /** After a second to settle: the server's RSS, then the probe's acquire latencies. */
    const measure = async (what: string, suffix: string) => {
      await sleep(1_000);
      const rss = residentBytes(server.pid);
      const probeRun = probe(server.url, `${prefix}:${suffix}`, options.probeCount);
      return { rss, latency: await withTimeout(what, options.phaseTimeoutMs, probeRun) };
    };

    const acquireStart = performance.now();
    await acquire(options.probeAtLocks, `acquiring ${options.probeAtLocks} locks`);
    let acquireMs = performance.now() - acquireStart;
    const atProbe = await measure('the first probe', 'p1');

    const restStart = performance.now();
    await acquire(locks - options.probeAtLocks, `acquiring ${locks} locks`);
    acquireMs += performance.now() - restStart;
    const full = await measure('the second probe', 'p2');

    return {
      sessions,
      locks,
      probeAtLocks: options.probeAtLocks,
      workers: workerCount,
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
      errors,
      notes,
    };
  } finally {
    // The server first: closing 10,000 clients one by one would only keep it busy.
    await server.stop();
    for (const worker of workers) worker.child.kill('SIGKILL');
  }
}
