import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockName } from './support.js';

const packageDir = join(import.meta.dirname, '..');
const repoDir = join(packageDir, '..', '..');
const example = join(packageDir, 'examples', 'leader.mjs');
const TTL_MS = 2_000;

/**
 * The example is plain Node running the built package, as a user's program would, so dist
 * must match src. Built only when stale: in the repo's test command turbo has just built it,
 * and rewriting dist while other test files may load it would be asking for trouble.
 */
function ensureBuilt(dir: string): void {
  const entry = join(dir, 'dist', 'index.js');
  const newest = (folder: string): number =>
    Math.max(
      ...readdirSync(folder, { withFileTypes: true }).map((entry) =>
        entry.isDirectory()
          ? newest(join(folder, entry.name))
          : statSync(join(folder, entry.name)).mtimeMs,
      ),
    );
  if (existsSync(entry) && statSync(entry).mtimeMs >= newest(join(dir, 'src'))) return;
  try {
    execFileSync(join(repoDir, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], {
      cwd: dir,
      encoding: 'utf8',
      stdio: 'pipe',
    });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`building ${dir} failed:\n${stdout ?? ''}${stderr ?? ''}`);
  }
}

interface Candidate {
  proc: ChildProcess;
  lines: { at: number; text: string }[];
  /** What it printed on stderr so far. */
  stderr(): string;
  /** Resolves with the first line (and when it arrived) that matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<{ at: number; match: RegExpMatchArray }>;
}

function startCandidate(url: string, name: string): Candidate {
  const proc = spawn(process.execPath, [example, url, name, String(TTL_MS)], {
    cwd: packageDir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: { at: number; text: string }[] = [];
  const waiters = new Set<() => void>();
  let buffered = '';
  let stderr = '';
  proc.stdout?.on('data', (chunk: Buffer) => {
    const at = performance.now();
    buffered += chunk.toString('utf8');
    const parts = buffered.split('\n');
    buffered = parts.pop() ?? '';
    for (const text of parts) lines.push({ at, text });
    for (const wake of waiters) wake();
  });
  proc.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  return {
    proc,
    lines,
    stderr: () => stderr,
    waitFor(pattern, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          for (const line of lines) {
            const match = line.text.match(pattern);
            if (match) {
              done();
              resolve({ at: line.at, match });
              return;
            }
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(
              `no line matching ${pattern} within ${timeoutMs} ms.\nstdout:\n${lines
                .map((l) => l.text)
                .join('\n')}\nstderr:\n${stderr}`,
            ),
          );
        }, timeoutMs);
        const onExit = () => {
          done();
          reject(new Error(`the candidate exited before ${pattern}:\n${stderr}`));
        };
        const done = () => {
          clearTimeout(timer);
          waiters.delete(check);
          proc.off('exit', onExit);
        };
        waiters.add(check);
        proc.once('exit', onExit);
        check();
      });
    },
  };
}

describe('examples/leader.mjs: two processes, the leader killed with kill -9', () => {
  let backend: LockBackend;
  let server: RunningServer;
  const candidates: Candidate[] = [];

  beforeAll(async () => {
    if (!existsSync(join(repoDir, 'packages', 'protocol', 'dist', 'index.js'))) {
      ensureBuilt(join(repoDir, 'packages', 'protocol'));
    }
    ensureBuilt(join(repoDir, 'packages', 'core'));
    ensureBuilt(packageDir);
    backend = await embeddedBackend();
    server = await startServer({ port: 0, backend });
  });

  afterAll(async () => {
    await Promise.all(
      candidates.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.proc.exitCode !== null || c.proc.signalCode !== null) return resolve();
            c.proc.once('exit', () => resolve());
            c.proc.kill('SIGKILL');
          }),
      ),
    );
    await server?.close();
    await backend?.close();
  });

  it('the follower leads within the TTL, with a higher term, and only after the leader died', async () => {
    const name = lockName('leader-example');
    const first = startCandidate(server.url, name);
    candidates.push(first);
    const led = await first.waitFor(/leading term=(\d+)/);
    const firstTerm = BigInt(led.match[1] ?? '0');
    await first.waitFor(/work term=\d+ tick=1/);

    const second = startCandidate(server.url, name);
    candidates.push(second);
    // The follower sees the leader (and so is connected and campaigning).
    await second.waitFor(new RegExp(`observed leader=\\S+ term=${firstTerm}`));
    const ticksBefore = first.lines.filter((l) => l.text.includes(' work ')).length;
    await new Promise((resolve) => setTimeout(resolve, 700));
    // The leader kept working while the follower waited.
    expect(first.lines.filter((l) => l.text.includes(' work ')).length).toBeGreaterThan(
      ticksBefore,
    );
    expect(second.lines.some((l) => l.text.includes('leading'))).toBe(false);

    const exited = new Promise((resolve) => first.proc.once('exit', resolve));
    const killedAt = performance.now();
    first.proc.kill('SIGKILL');
    await exited;
    const took = await second.waitFor(/leading term=(\d+)/, TTL_MS + 5_000);
    const failoverMs = took.at - killedAt;
    console.log(
      `leader election failover (examples/leader.mjs, ttlMs ${TTL_MS}): leader killed -> follower leads in ${failoverMs.toFixed(0)} ms`,
    );
    expect(BigInt(took.match[1] ?? '0')).toBeGreaterThan(firstTerm);
    // Within the TTL (the dead leader's lease runs out; nothing frees it earlier), plus a
    // bound for a loaded machine.
    expect(failoverMs).toBeLessThan(TTL_MS + 1_000);
    // And not before the lease could have run out: the dead leader renewed at least every
    // third of the TTL, so at least ~2/3 of it were left when it died.
    expect(failoverMs).toBeGreaterThan(TTL_MS / 3);
    await second.waitFor(/work term=\d+ tick=0/);
    // Leading for a while (a tick every 250 ms) leaves nothing behind: the example once added
    // an abort listener per tick, and Node warned (MaxListenersExceededWarning) after ~2.5 s.
    await second.waitFor(/work term=\d+ tick=14/);
    expect(second.stderr()).toBe('');

    // A graceful stop hands over at once: SIGTERM makes the example close its client, which
    // releases the lock.
    second.proc.kill('SIGTERM');
    await new Promise((resolve) => second.proc.once('exit', resolve));
    expect(await backend.inspect(name)).toBeNull();
  });
});
