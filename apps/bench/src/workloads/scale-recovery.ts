import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@dlm/client';
import { sleep } from '../lockers/locker.js';
import { startServerProcess } from '../server-process.js';
import type { HeldSample } from './scale-protocol.js';
// The client processes that hold the locks (shared with workload 4's main step).
import * as fleet from './scale-workers.js';

export interface RecoveryOptions {
  locks: number;
  /** Sessions that acquire the locks (how many hold them does not matter to the journal). */
  sessions: number;
  sessionsPerWorker: number;
  /** How long the restarted server is left alone before its RSS is read. */
  settleMs: number;
  phaseTimeoutMs: number;
}

export interface RecoveryResult {
  /** The locks held when the server was killed: those asked for, less `acquireFailures`. */
  locks: number;
  /**
   * Acquires that failed on the data-dir server: an fsync slower than the journal's bound on a
   * busy disk fails them UNAVAILABLE. They shrink the journal measured, not the run.
   */
  acquireFailures: number;
  sessions: number;
  /** Acquiring the locks on the data-dir server (each grant journaled and fsynced). */
  acquireMs: number;
  /** The data dir's size (journal, snapshot, high-water mark) when the server was killed. */
  journalMiB: number;
  /** From the restart until `/healthz` answered (polled every 50 ms). */
  readyMs: number;
  /** From the restart until a new session's `lock.get` answered a held name with its token. */
  recoveryMs: number;
  /** The restarted server's RSS with the recovered locks and no sessions, after `settleMs`. */
  rssMiB: number;
  /** Held names looked up after the restart (one per client process), all still held. */
  checked: number;
  errors: number;
  notes: string[];
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir)) total += (await stat(join(dir, entry))).size;
  return total;
}

function dataDirServer(dataDir: string, sessions: number) {
  return startServerProcess({ backendArgs: fleet.embeddedServerArgs(dataDir, sessions) });
}

/**
 * Which samples are not held with their token, asked of the server by a fresh session, and the
 * time from `t0` until its first `lock.get` was answered.
 */
export async function lookUpHeld(url: string, samples: HeldSample[], t0: number) {
  const client = createClient({ url, pingIntervalMs: 0, name: 'bench-scale-recovery' });
  const missing: string[] = [];
  let recoveryMs = Number.NaN;
  try {
    await client.connect();
    for (const sample of samples) {
      const info = await client.get(sample.name);
      if (Number.isNaN(recoveryMs)) recoveryMs = performance.now() - t0;
      if (!info.held || info.token !== BigInt(sample.token)) {
        missing.push(`${sample.name} (token ${sample.token}) is not held after the restart`);
      }
    }
  } finally {
    await client.close();
  }
  return { recoveryMs, missing };
}

/** Holds the locks, `kill -9`s the server, restarts it on the same dir and times the return. */
async function holdKillRestart(
  server: Awaited<ReturnType<typeof dataDirServer>>,
  dataDir: string,
  prefix: string,
  options: RecoveryOptions,
) {
  let workers: fleet.ScaleWorker[] = [];
  const t0 = performance.now();
  try {
    workers = fleet.startWorkers(options.sessions, options.sessionsPerWorker);
    const connected = await fleet.connectWorkers(workers, server.url, options.phaseTimeoutMs);
    const request = { count: options.locks, prefix, ttlMs: 600_000 };
    const acquired = await fleet.acquireOnWorkers(workers, request, options.phaseTimeoutMs);
    const acquireMs = performance.now() - t0;
    // The clients go first, so that none reconnects to the restarted server; their leases stay
    // held (a closed session's locks run out by their TTL, not at once).
    fleet.killWorkers(workers);
    await server.process.kill();
    const journalBytes = await dirBytes(dataDir);
    const restart = performance.now();
    await server.process.start();
    const readyMs = performance.now() - restart;
    const run = lookUpHeld(server.url, acquired.samples, restart);
    const looked = await fleet.withTimeout(
      'the lookup after recovery',
      options.phaseTimeoutMs,
      run,
    );
    return { connected, acquired, acquireMs, journalBytes, readyMs, ...looked };
  } finally {
    fleet.killWorkers(workers);
  }
}

/**
 * The recovery step of workload 4: a data-dir server holds `locks` locks, is killed with
 * SIGKILL and started again on the same data dir; `recoveryMs` is the time from that restart
 * until a new session is told one of the locks is still held with its token.
 */
export async function runRecovery(
  prefix: string,
  options: RecoveryOptions,
): Promise<RecoveryResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'dlm-bench-recovery-'));
  let server: Awaited<ReturnType<typeof dataDirServer>> | undefined;
  try {
    server = await dataDirServer(dataDir, options.sessions);
    const run = await holdKillRestart(server, dataDir, prefix, options);
    await sleep(options.settleMs);
    const failures = run.acquired.errors;
    const notes = [...run.connected.notes, ...run.acquired.notes, ...run.missing];
    if (failures > 0) notes.push(`recovery: ${failures} of ${options.locks} acquires failed`);
    if (run.acquired.samples.length === 0) notes.push('recovery: no held lock to look up');
    return {
      locks: options.locks - failures,
      acquireFailures: failures,
      sessions: options.sessions,
      acquireMs: run.acquireMs,
      journalMiB: run.journalBytes / fleet.MiB,
      readyMs: run.readyMs,
      recoveryMs: run.recoveryMs,
      rssMiB: fleet.residentBytes(server.process.pid!) / fleet.MiB,
      checked: run.acquired.samples.length,
      errors:
        run.connected.errors + run.missing.length + (run.acquired.samples.length === 0 ? 1 : 0),
      notes,
    };
  } finally {
    await server?.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}
