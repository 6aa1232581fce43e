import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, type ManagedProcess, startProcess } from '@dlm/test-services';

/**
 * The dlm server as a deployment runs it: its own Node process (`apps/server/dist/main.js`)
 * with the backend flags, so the benchmark's clients and the server do not share an event
 * loop. Started through `@dlm/test-services`' `startProcess`, which kills it if we exit.
 */

export interface ServerProcessOptions {
  /** Backend flags, e.g. `['--backend', 'redis', '--redis-url', url]`. */
  backendArgs: string[];
  /** Write a V8 CPU profile of the server here on shutdown (`node --cpu-prof`). */
  profileDir?: string | undefined;
  /** The profile's file name (`<name>.cpuprofile`). */
  profileName?: string;
  /** Raise the server's open-file limit (`ulimit -n`) to this, for many connections. */
  openFiles?: number | undefined;
  /** Another build of the server's `main.js` (a before/after comparison); default: this one. */
  serverMain?: string | undefined;
  /** More flags for node (before the script), and more environment. */
  nodeArgs?: string[];
  env?: NodeJS.ProcessEnv;
}

export interface ServerProcess {
  /** `ws://127.0.0.1:PORT/v1/ws` */
  readonly url: string;
  readonly pid: number;
  readonly process: ManagedProcess;
  /** SIGTERM (graceful: the CPU profile is written), SIGKILL after 10 s. */
  stop(): Promise<void>;
}

/**
 * `apps/server/dist/main.js`, found through the workspace dependency (which resolves to the
 * server's `src/` under vitest: the process runs the built file all the same).
 */
export function serverMainPath(): string {
  const dir = dirname(fileURLToPath(import.meta.resolve('@dlm/server')));
  return join(basename(dir) === 'src' ? join(dir, '..', 'dist') : dir, 'main.js');
}

async function healthy(httpUrl: string): Promise<boolean> {
  try {
    const response = await fetch(`${httpUrl}/healthz`, { signal: AbortSignal.timeout(1_000) });
    return response.ok;
  } catch {
    return false;
  }
}

export async function startServerProcess(options: ServerProcessOptions): Promise<ServerProcess> {
  const port = await freePort();
  const nodeArgs: string[] = [...(options.nodeArgs ?? [])];
  if (options.profileDir) {
    nodeArgs.push(
      '--cpu-prof',
      '--cpu-prof-dir',
      options.profileDir,
      '--cpu-prof-name',
      `${options.profileName ?? 'server'}.cpuprofile`,
    );
  }
  const args = [
    ...nodeArgs,
    options.serverMain ?? serverMainPath(),
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--log-level',
    'warn',
    ...options.backendArgs,
  ];
  // `exec` keeps the pid: the RSS we read and the signals we send reach node itself.
  const [command, commandArgs] =
    options.openFiles === undefined
      ? [process.execPath, args]
      : [
          'sh',
          ['-c', `ulimit -n ${options.openFiles} && exec "$0" "$@"`, process.execPath, ...args],
        ];
  const httpUrl = `http://127.0.0.1:${port}`;
  const managed = await startProcess({
    name: `dlm-server:${port}`,
    command,
    args: commandArgs,
    ready: () => healthy(httpUrl),
    ...(options.env ? { env: options.env } : {}),
    readyTimeoutMs: 30_000,
  });
  return {
    url: `ws://127.0.0.1:${port}/v1/ws`,
    pid: managed.pid!,
    process: managed,
    stop: () => managed.stop(10_000),
  };
}
