import { type ChildProcess, type SpawnOptions, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createClient } from '@dlm/client';
import { type RunningServer, startServer } from '@dlm/server';
import {
  freePort,
  portOpen,
  type RedisService,
  redisAvailable,
  startRedis,
  tempDir,
} from '@dlm/test-services';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allBlocks, blockName, type CodeBlock, DATA_LANGUAGES } from '../src/blocks.js';

/**
 * Every code block in a README that says it runs (`run`, `run=serve`, `ci`) is run here, as a
 * reader would run it, against a real dlm server this test starts; every other block must say
 * it is a `sketch` (CONTRIBUTING.md). The blocks' `127.0.0.1:7070` / `localhost:7070` become
 * that server's address, `redis://127.0.0.1:6379` a real redis-server's, and shell blocks get
 * `DLM_URL`. JS blocks run on this Node as they are (an `.mjs` file); TS blocks run after
 * TypeScript's own lowering (the compiler the repo builds with), which is what lets
 * `await using` run on Node 20. Needs the packages built (`pnpm test` builds first).
 */

const root = resolve(import.meta.dirname, '..', '..', '..');
// Inside this package's node_modules: `@dlm/*` resolve from there, and no linter looks in.
const scratch = join(import.meta.dirname, '..', 'node_modules', '.readme-blocks');
const blocks = allBlocks(root);
const runnable = blocks.filter((block) => block.marker !== undefined && block.marker !== 'sketch');
const needsRedis = runnable.some((block) => block.code.includes('redis://127.0.0.1:6379'));
const withRedis = needsRedis && redisAvailable();

let server: RunningServer;
let redis: RedisService | undefined;

beforeAll(async () => {
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  server = await startServer({ port: 0 });
  if (withRedis) redis = await startRedis();
});

afterAll(async () => {
  await server?.close();
  await redis?.stop();
});

function substitute(code: string): string {
  let out = code.replace(/\b(127\.0\.0\.1|localhost):7070\b/g, `127.0.0.1:${server.port}`);
  if (redis) out = out.replaceAll('redis://127.0.0.1:6379', redis.url);
  return out;
}

interface Outcome {
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * A child process, waited for without blocking: the server the blocks talk to runs in this
 * process, so a synchronous spawn would leave it unable to answer.
 */
function run(
  command: string,
  args: string[],
  options: SpawnOptions & { timeoutMs: number },
): Promise<Outcome> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr?.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      stderr += `\n(killed after ${options.timeoutMs} ms)`;
    }, options.timeoutMs);
    child.once('error', fail);
    child.once('close', (status) => {
      clearTimeout(timer);
      done({ status, stdout, stderr });
    });
  });
}

function explain(block: CodeBlock, outcome: Outcome): string {
  return `${blockName(block)} failed (exit ${outcome.status}):\n${outcome.stdout}\n${outcome.stderr}`;
}

/** A JS or TS block as an ES module next to this package, where `@dlm/*` resolve to dist/. */
function runModule(block: CodeBlock): Promise<Outcome> {
  let code = substitute(block.code);
  if (block.language === 'ts') {
    code = ts.transpileModule(code, {
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        verbatimModuleSyntax: false,
      },
    }).outputText;
  }
  const file = join(scratch, `${block.file.replace(/[^\w]+/g, '-')}-${block.line}.mjs`);
  writeFileSync(file, code);
  return run(process.execPath, [file], { cwd: scratch, timeoutMs: 60_000 });
}

function runShell(block: CodeBlock): Promise<Outcome> {
  return run('sh', ['-ec', substitute(block.code)], {
    cwd: root,
    timeoutMs: 100_000,
    env: { ...process.env, DLM_URL: server.url },
  });
}

/** Starts a `run=serve` block, checks that a dlm server answers on its port, then stops it. */
async function runServe(block: CodeBlock): Promise<void> {
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn('sh', ['-ec', substitute(block.code)], {
    cwd: root,
    detached: true, // its own process group: pnpm, turbo and the server stop together
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, DLM_PORT: String(port), XDG_STATE_HOME: tempDir('readme-state') },
  });
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  let ended = false;
  void exited.then(() => {
    ended = true;
  });
  try {
    const deadline = Date.now() + 90_000;
    while (!(await portOpen(port))) {
      if (ended) throw new Error(`${blockName(block)} exited before serving:\n${output}`);
      if (Date.now() > deadline) throw new Error(`${blockName(block)} never served:\n${output}`);
      await new Promise((wait) => setTimeout(wait, 200));
    }
    const client = createClient({ url: `ws://127.0.0.1:${port}/v1/ws` });
    try {
      expect(await client.get('readme/serve')).toEqual({
        name: 'readme/serve',
        held: false,
        waiters: 0,
        waitersScope: 'server',
      });
    } finally {
      await client.close();
    }
  } finally {
    if (!ended && child.pid) process.kill(-child.pid, 'SIGTERM');
    await exited;
  }
}

describe('the code blocks of every README', () => {
  it('each say whether they run (run, run=serve, ci) or are a sketch', () => {
    const unmarked = blocks
      .filter((block) => block.marker === undefined && !DATA_LANGUAGES.has(block.language))
      .map(blockName);
    expect(unmarked).toEqual([]);
  });

  it('that say they run are JS, TS or shell', () => {
    const odd = runnable
      .filter((block) => !['sh', 'js', 'ts'].includes(block.language))
      .filter((block) => !(block.marker === 'ci' && block.language === 'sh'))
      .map(blockName);
    expect(odd).toEqual([]);
  });
});

describe.each([...new Set(runnable.map((block) => block.file))])('%s', (file) => {
  for (const block of runnable.filter((candidate) => candidate.file === file)) {
    const name = `line ${block.line}: ${block.language} ${block.marker}`;
    const redisMissing = block.code.includes('redis://127.0.0.1:6379') && !withRedis;
    it.skipIf(redisMissing)(name, async () => {
      if (block.marker === 'ci') {
        const ci = readFileSync(join(root, '.ci', 'run'), 'utf8').split('\n');
        const lines = block.code.split('\n').filter((line) => line.trim() !== '');
        expect(
          lines.filter((line) => !ci.includes(line)),
          `${blockName(block)} not in .ci/run`,
        ).toEqual([]);
        return;
      }
      if (block.marker === 'run=serve') {
        await runServe(block);
        return;
      }
      const outcome = await (block.language === 'sh' ? runShell(block) : runModule(block));
      if (outcome.status !== 0) throw new Error(explain(block, outcome));
    });
  }
});
