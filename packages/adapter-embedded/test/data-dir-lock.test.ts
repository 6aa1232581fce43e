import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDlmError } from '@dlm/core';
import { tempDir } from '@dlm/test-services';
import { afterEach, describe, expect, it } from 'vitest';
import { embeddedBackend } from '../src/index.js';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

function start(command: string, args: string[]): ChildProcess {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  children.push(child);
  return child;
}

/** A data dir whose LOCK names `pid`, as a server with that pid would have left it. */
function lockedBy(pid: number): string {
  const dir = tempDir('data-dir-lock');
  writeFileSync(join(dir, 'LOCK'), `${pid}\n`);
  return dir;
}

describe('the data dir LOCK', () => {
  it('held by a process that has exited but is not reaped yet (a zombie) is taken over at once', async () => {
    // sh starts `sleep` in the background, prints its pid and becomes another `sleep`, which
    // never reaps it: killed, the first sleep stays a zombie while its parent lives.
    const parent = start('sh', ['-c', 'sleep 60 & echo $!; exec sleep 60']);
    const pid = await new Promise<number>((resolve) =>
      parent.stdout!.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))),
    );
    process.kill(pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const startedAt = performance.now();
    const backend = await embeddedBackend({ dataDir: lockedBy(pid) });
    expect(performance.now() - startedAt).toBeLessThan(500);
    await backend.close();
  });

  it('held by a process that goes within a moment (kill -9 just before a restart) is taken over', async () => {
    const holder = start('sleep', ['60']);
    const dir = lockedBy(holder.pid!);
    setTimeout(() => holder.kill('SIGKILL'), 300);
    const backend = await embeddedBackend({ dataDir: dir });
    await backend.close();
  });

  it('held by a live process is refused, after waiting a little for it to go', async () => {
    const holder = start('sleep', ['60']);
    const startedAt = performance.now();
    const error = await embeddedBackend({ dataDir: lockedBy(holder.pid!) }).catch((e) => e);
    expect(isDlmError(error, 'UNAVAILABLE')).toBe(true);
    expect((error as Error).message).toMatch(`is in use by process ${holder.pid}`);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(1_900);
  });
});
