import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createClient, type DlmClient } from '@dlm/client';
import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, beforeAll } from 'vitest';

// These tests run the built CLI (`dist/main.js`) as its own process, as a user would: exit
// codes, signals and the child command are real. `pnpm test` builds first.
export const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

export function assertBuilt(): void {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (pnpm build)`);
}

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface Running {
  child: ChildProcess;
  /** Everything printed so far. */
  stdout(): string;
  stderr(): string;
  finished: Promise<Finished>;
  /** Resolves once stdout has a line matching `pattern`. */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Starts `dlm ARGS` with `env` added to the environment. */
export function startDlm(args: string[], env: NodeJS.ProcessEnv = {}): Running {
  const child = spawn(process.execPath, [MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let stdout = '';
  let stderr = '';
  const wakers = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (const wake of wakers) wake();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const finished = new Promise<Finished>((resolve) => {
    child.once('close', (code, signal) => {
      live.delete(child);
      for (const wake of wakers) wake();
      resolve({ code, signal, stdout, stderr });
    });
  });
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    finished,
    async waitForOutput(pattern, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (!pattern.test(stdout)) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`dlm exited before printing ${pattern}:\n${stdout}\n${stderr}`);
        if (Date.now() > deadline) throw new Error(`no ${pattern} in time:\n${stdout}\n${stderr}`);
        await new Promise<void>((resolve) => {
          wakers.add(resolve);
          setTimeout(resolve, 50);
        }).finally(() => wakers.clear());
      }
    },
  };
}

/** Runs `dlm ARGS` to the end. */
export function runDlm(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Finished> {
  return startDlm(args, env).finished;
}

/** A pause of the test's own (a scene being set, a lease running on), not of the CLI. */
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));

const COMMAND = fileURLToPath(new URL('./fixtures/command.mjs', import.meta.url));

/** The fixture command's arguments in DIR and MODE, as `dlm lock` takes them after `--`. */
export function fixtureCommand(dir: string, mode: string, arg?: string | number): string[] {
  return [process.execPath, COMMAND, dir, mode, ...(arg === undefined ? [] : [String(arg)])];
}

/** The text of the file at `path` once it exists (the fixture command writes it when it runs). */
export async function waitForFile(path: string, timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`${path} did not appear`);
    await sleep(20);
  }
  return readFileSync(path, 'utf8');
}

/** The server a test file's `dlm` runs talk to, and a client of it to set the scene with. */
export interface CliServer {
  readonly server: RunningServer;
  readonly client: DlmClient;
  /** `DLM_URL` for the server: pass it to `runDlm`/`startDlm` (filled in before the tests run). */
  readonly env: NodeJS.ProcessEnv;
}

/** Checks the CLI is built, starts a {@link CliServer} before the file's tests and closes it after. */
export function useCliServer(): CliServer {
  let server: RunningServer | undefined;
  let client: DlmClient | undefined;
  const env: NodeJS.ProcessEnv = {};
  beforeAll(async () => {
    assertBuilt();
    server = await startServer({ port: 0 });
    env.DLM_URL = server.url;
    client = createClient({ url: server.url });
  });
  afterAll(async () => {
    await client?.close();
    await server?.close();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the CLI test server starts in beforeAll');
    return value;
  };
  return {
    get server() {
      return started(server);
    },
    get client() {
      return started(client);
    },
    env,
  };
}

/** The JSON values of output written one per line (`--json` watch changes, the server's log). */
export function jsonLines(output: string): any[] {
  return output
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
}
