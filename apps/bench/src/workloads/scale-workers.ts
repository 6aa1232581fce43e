import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { backendArgs } from '@dlm/server';
import type { FromWorker, HeldSample, ToWorker } from './scale-protocol.js';

/**
 * The scale workload's client processes (`scale-worker.ts`): started, told to connect and to
 * acquire, and killed. Each gets its own source address (127.0.0.2, 127.0.0.3, …): loopback
 * gives about 28,000 ephemeral ports per (source address, destination) pair, fewer than the
 * 50,000 sessions the issue asks for.
 */

export const MiB = 1024 * 1024;

/** The resident set of a process, from /proc (Linux), in bytes. */
export function residentBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(match[1]) * 1024;
}

/**
 * The backend flags of an embedded server (`dataDir`: null for `--memory`, else `--data-dir`)
 * for `sessions` scale sessions. The server's per-address connection limit (1,000 by default)
 * guards against one client host taking every connection; here each client process has one
 * source address on purpose.
 */
export function embeddedServerArgs(dataDir: string | null, sessions: number): string[] {
  const connectionLimit = String(sessions + 64);
  return [
    ...backendArgs({ kind: 'embedded', dataDir }),
    '--max-connections-per-address',
    connectionLimit,
    '--max-connections',
    connectionLimit,
  ];
}

export interface ScaleWorker {
  child: ChildProcess;
  sessions: number;
  localAddress: string;
  request(message: ToWorker): Promise<FromWorker>;
}

/** What a phase run on every worker gave: failures, their first messages, held samples. */
export interface PhaseOutcome {
  errors: number;
  notes: string[];
  samples: HeldSample[];
}

export function withTimeout<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`scale: ${what} took over ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The worker's built script: beside this module's directory in `dist/`, or in `dist/` when this
 * module runs from `src/` (under vitest), since a child process cannot run TypeScript.
 */
const WORKER_SCRIPT = new URL(
  import.meta.url.endsWith('.ts') ? '../../dist/scale-worker.js' : '../scale-worker.js',
  import.meta.url,
);

function startWorker(sessions: number, localAddress: string): ScaleWorker {
  const child = fork(WORKER_SCRIPT, [], {
    // Not the parent's flags: under vitest they make workspace packages resolve to TypeScript.
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return {
    child,
    sessions,
    localAddress,
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

/** `sessions` spread over processes of at most `perWorker`, one source address each. */
export function startWorkers(sessions: number, perWorker: number): ScaleWorker[] {
  const count = Math.ceil(sessions / perWorker);
  if (count > 250) throw new Error(`scale: ${count} client processes, more than 127.0.0.2–.251`);
  return Array.from({ length: count }, (_, i) =>
    startWorker(Math.min(perWorker, sessions - i * perWorker), `127.0.0.${2 + i}`),
  );
}

export function killWorkers(workers: ScaleWorker[]): void {
  for (const worker of workers) worker.child.kill('SIGKILL');
}

/** Splits `total` into parts proportional to each worker's sessions. */
function split(total: number, workers: ScaleWorker[]): number[] {
  const sessions = workers.reduce((sum, worker) => sum + worker.sessions, 0);
  const parts = workers.map((worker) => Math.floor((total * worker.sessions) / sessions));
  parts[0]! += total - parts.reduce((sum, part) => sum + part, 0);
  return parts;
}

function outcome(what: string, replies: FromWorker[]): PhaseOutcome {
  const result: PhaseOutcome = { errors: 0, notes: [], samples: [] };
  for (const reply of replies) {
    result.errors += reply.failed;
    if (reply.error) result.notes.push(`${what}: ${reply.error}`);
    if (reply.type === 'acquired' && reply.sample) result.samples.push(reply.sample);
  }
  return result;
}

/** Every worker opens its sessions to `url`. */
export async function connectWorkers(
  workers: ScaleWorker[],
  url: string,
  timeoutMs: number,
): Promise<PhaseOutcome> {
  const replies = await withTimeout(
    'connecting the sessions',
    timeoutMs,
    Promise.all(
      workers.map(({ sessions, localAddress, request }) =>
        request({ type: 'connect', url, sessions, localAddress }),
      ),
    ),
  );
  return outcome('connect', replies);
}

/** The workers acquire `count` locks between them (held `ttlMs`, never released). */
export async function acquireOnWorkers(
  workers: ScaleWorker[],
  request: { count: number; prefix: string; ttlMs: number },
  timeoutMs: number,
): Promise<PhaseOutcome> {
  const what = `acquiring ${request.count} locks`;
  const { prefix, ttlMs } = request;
  const replies = await withTimeout(
    what,
    timeoutMs,
    Promise.all(
      split(request.count, workers).map((count, i) =>
        workers[i]!.request({ type: 'acquire', count, ttlMs, prefix }),
      ),
    ),
  );
  return outcome(what, replies);
}
