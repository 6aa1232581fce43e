import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Process plumbing shared by every service starter in this package: free loopback ports,
 * throwaway directories, and child processes that are killed when the test process exits.
 */

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not read the free port'));
      });
    });
  });
}

const tempDirs = new Set<string>();
const STALE_AFTER_MS = 3 * 60 * 60 * 1000;
let swept = false;

/**
 * Test runners do not always let a worker run its exit hooks (vitest ends its workers without
 * them), so directories of earlier runs are swept here: any `dlm-*` directory in the temp dir
 * untouched for three hours belongs to no running test.
 */
function sweepStaleDirs(): void {
  if (swept) return;
  swept = true;
  const cutoff = Date.now() - STALE_AFTER_MS;
  for (const entry of readdirSync(tmpdir())) {
    if (!entry.startsWith('dlm-')) continue;
    const path = join(tmpdir(), entry);
    try {
      if (statSync(path).mtimeMs < cutoff) rmSync(path, { recursive: true, force: true });
    } catch {}
  }
}

/** A new empty directory under the OS temp dir, removed when the process exits. */
export function tempDir(prefix: string): string {
  sweepStaleDirs();
  const dir = mkdtempSync(join(tmpdir(), `dlm-${prefix}-`));
  tempDirs.add(dir);
  return dir;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of live) {
      try {
        // A SIGSTOPped child ignores SIGKILL until continued on some kernels' views of it;
        // SIGCONT first so nothing outlives the tests.
        child.kill('SIGCONT');
        child.kill('SIGKILL');
      } catch {}
    }
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  });
}

/** Where a binary is on PATH, or null. */
export function findBinary(name: string): string | null {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const path = found.stdout.trim();
  return found.status === 0 && path ? path : null;
}

/**
 * Whether tests that need `what` should run. Missing outside CI: they skip, and say why.
 * Missing with CI=true: a failure, never a silent skip.
 */
export function serviceAvailable(what: string, present: boolean): boolean {
  if (present) return true;
  if (process.env.CI === 'true') {
    throw new Error(`${what} is required with CI=true but was not found (install it; see README)`);
  }
  console.warn(`[test-services] ${what} not found: skipping the tests that need it`);
  return false;
}

export interface ProcessSpec {
  /** Shown in errors and logs. */
  name: string;
  command: string;
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Resolves true once the process serves requests. Called repeatedly until it does. */
  ready: () => Promise<boolean>;
  readyTimeoutMs?: number;
}

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number | undefined;
  /** The last lines the process printed, for error messages. */
  output(): string;
  /** SIGKILL and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after `graceMs`; waits for the exit. */
  stop(graceMs?: number): Promise<void>;
  /** SIGSTOP: the process keeps its sockets open but answers nothing. */
  pause(): void;
  /** SIGCONT after `pause`. */
  resume(): void;
  /** Starts the same command again (after kill/stop) and waits until ready. */
  start(): Promise<void>;
  readonly running: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Spawns a service and waits until `spec.ready()` says it serves. */
export async function startProcess(spec: ProcessSpec): Promise<ManagedProcess> {
  installExitHook();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let log = '';

  const launch = async () => {
    const proc = spawn(spec.command, spec.args, {
      cwd: spec.cwd,
      env: { ...process.env, ...spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = proc;
    live.add(proc);
    const append = (chunk: Buffer) => {
      log = (log + chunk.toString('utf8')).slice(-8_000);
    };
    proc.stdout?.on('data', append);
    proc.stderr?.on('data', append);
    exited = new Promise((resolve) => {
      proc.once('exit', () => {
        live.delete(proc);
        resolve();
      });
    });
    const deadline = Date.now() + (spec.readyTimeoutMs ?? 30_000);
    let spawnError: Error | undefined;
    proc.once('error', (error) => {
      spawnError = error;
    });
    for (;;) {
      if (spawnError) throw new Error(`${spec.name}: could not start: ${spawnError.message}`);
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`${spec.name} exited during start-up:\n${log}`);
      }
      if (await spec.ready().catch(() => false)) return;
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`${spec.name} was not ready in time:\n${log}`);
      }
      await sleep(50);
    }
  };

  await launch();

  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  return {
    name: spec.name,
    get pid() {
      return child?.pid;
    },
    get running() {
      return running();
    },
    output: () => log,
    async kill() {
      if (!running()) return;
      child!.kill('SIGCONT');
      child!.kill('SIGKILL');
      await exited;
    },
    async stop(graceMs = 5_000) {
      if (!running()) return;
      child!.kill('SIGCONT');
      child!.kill('SIGTERM');
      const timer = setTimeout(() => child?.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
    pause: () => {
      child?.kill('SIGSTOP');
    },
    resume: () => {
      child?.kill('SIGCONT');
    },
    async start() {
      if (running()) throw new Error(`${spec.name} is already running`);
      await launch();
    },
  };
}

/**
 * A `ManagedProcess` that forwards to `managed`, with `extra` on top (a service's URL, or its
 * own kill/pause). Spread would copy the getters' current values: they are forwarded instead.
 * (`NoInfer`: `T` is what `extra` holds, not the service type the caller returns.)
 */
export function forwardProcess<T extends object>(
  managed: ManagedProcess,
  extra: T,
): ManagedProcess & NoInfer<T> {
  const forwarded: ManagedProcess = {
    get name() {
      return managed.name;
    },
    get pid() {
      return managed.pid;
    },
    get running() {
      return managed.running;
    },
    output: () => managed.output(),
    kill: () => managed.kill(),
    stop: (graceMs?: number) => managed.stop(graceMs),
    pause: () => managed.pause(),
    resume: () => managed.resume(),
    start: () => managed.start(),
  };
  return Object.assign(forwarded, extra);
}

/**
 * The `ManagedProcess` side of the user's own server (`server`, e.g. `Redis`, from the variable
 * `env`): always running, stop does nothing, and kill/pause/resume/start refuse, since it is
 * not ours to control.
 */
export function externalProcess(name: string, server: string, env: string): ManagedProcess {
  const unsupported = (what: string): never => {
    throw new Error(
      `${what} is not supported against the external ${server} from ${env}: it is not ours to control`,
    );
  };
  return {
    name,
    pid: undefined,
    running: true,
    output: () => '',
    kill: () => Promise.reject(new Error(`kill: not supported against ${env}`)),
    stop: async () => {},
    pause: () => unsupported('pause'),
    resume: () => unsupported('resume'),
    start: () => Promise.reject(new Error(`start: not supported against ${env}`)),
  };
}

/**
 * Waits for every start, and resolves with all the started services; when one failed, `undo`
 * (kill or remove) runs on the others and the first failure is rethrown, so nothing is left
 * running behind an error.
 */
export async function allStarted<T>(
  starting: Promise<T>[],
  undo: (started: T) => Promise<unknown>,
): Promise<T[]> {
  const results = await Promise.allSettled(starting);
  const started = results.flatMap((result) =>
    result.status === 'fulfilled' ? [result.value] : [],
  );
  const failed = results.find(
    (result): result is PromiseRejectedResult => result.status === 'rejected',
  );
  if (!failed) return started;
  await Promise.all(started.map((value) => undo(value)));
  throw failed.reason;
}
