import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createManualClock, type LockBackend } from '@dlm/core';
// @dlm/test-services is not among this package's dependencies; its process helpers are
// imported by path so temp dirs are still made (and removed) in the one shared place.
import { tempDir } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { embeddedBackend } from '../src/index.js';

const packageDir = join(import.meta.dirname, '..');
const repoDir = join(packageDir, '..', '..');
const tsc = join(repoDir, 'node_modules', '.bin', 'tsc');

interface Reported {
  name: string;
  owner: string;
  token: bigint;
  ttlMs: number;
  /** The child's wall clock when it sent the request (at or before the journaled time). */
  wallMs: number;
}

describe('embedded backend after kill -9', () => {
  let child: ChildProcess | undefined;
  let backend: LockBackend | undefined;

  beforeAll(() => {
    // The child is plain Node (no TypeScript loader is installed), so it runs the built package.
    const build = (project: string) => {
      try {
        execFileSync(tsc, ['-p', project], { encoding: 'utf8', stdio: 'pipe' });
      } catch (error) {
        const { stdout, stderr } = error as { stdout?: string; stderr?: string };
        throw new Error(`tsc -p ${project} failed:\n${stdout ?? ''}${stderr ?? ''}`);
      }
    };
    if (!existsSync(join(repoDir, 'packages', 'core', 'dist', 'index.js'))) {
      build(join(repoDir, 'packages', 'core', 'tsconfig.build.json'));
    }
    build(join(packageDir, 'tsconfig.build.json'));
  });

  afterAll(async () => {
    child?.kill('SIGKILL');
    await backend?.close();
  });

  it('keeps every reported grant held with its token, and hands out only higher tokens', async () => {
    const dataDir = tempDir('embedded-kill9');
    child = spawn(
      process.execPath,
      [join(packageDir, 'test', 'fixtures', 'acquire-loop.mjs'), dataDir],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const proc = child;
    const granted = new Map<string, Reported>();
    const releasing = new Set<string>();
    const released = new Set<string>();
    let maxToken = 0n;
    let stderr = '';
    let buffered = '';
    proc.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));

    // Kill mid-stream: once enough grants were reported, while 16 loops still have requests in
    // flight, some of them in a batch that is being written.
    await new Promise<void>((resolve, reject) => {
      proc.once('exit', () => reject(new Error(`the child exited early:\n${stderr}`)));
      proc.stdout!.on('data', (chunk: Buffer) => {
        buffered += chunk.toString('utf8');
        const lines = buffered.split('\n');
        buffered = lines.pop()!;
        for (const line of lines) {
          const [kind, name, ...rest] = line.split(' ');
          if (kind === 'granted') {
            const [owner, token, ttlMs, wallMs] = rest;
            const reported: Reported = {
              name: name!,
              owner: owner!,
              token: BigInt(token!),
              ttlMs: Number(ttlMs),
              wallMs: Number(wallMs),
            };
            granted.set(reported.name, reported);
            if (reported.token > maxToken) maxToken = reported.token;
          } else if (kind === 'releasing') {
            releasing.add(name!);
          } else if (kind === 'released') {
            released.add(name!);
          } else if (kind === 'error') {
            reject(new Error(line));
          }
        }
        if (granted.size >= 2_000 && !proc.killed) {
          proc.kill('SIGKILL');
          resolve();
        }
      });
    });
    await exited;
    expect(proc.signalCode).toBe('SIGKILL');

    // A manual clock freezes the recovered leases' time: the checks below take a while on a busy
    // machine, and a short lease must not run out between recovery and its check.
    backend = await embeddedBackend({ dataDir, clock: createManualClock() });
    const reopenedAt = Date.now();
    let checkedHeld = 0;
    for (const reported of granted.values()) {
      const state = await backend.inspect(reported.name);
      if (released.has(reported.name)) {
        expect(state, `${reported.name} was released`).toBeNull();
        continue;
      }
      if (releasing.has(reported.name)) {
        // Its release was in flight at the kill: free or still held, but by nobody else.
        if (state !== null) expect(state).toMatchObject({ token: reported.token });
        continue;
      }
      // Recovery drops a lease only when the wall clock shows its whole TTL gone since its
      // record, which was written after the child sent the request.
      if (reopenedAt - reported.wallMs >= reported.ttlMs) continue;
      checkedHeld++;
      expect(state, `${reported.name} was reported granted`).toMatchObject({
        owner: reported.owner,
        token: reported.token,
      });
      const other = await backend.tryAcquire({ name: reported.name, owner: 'intruder', ttlMs: 10 });
      expect(other.granted, `${reported.name} was taken from its holder`).toBe(false);
    }
    console.log(
      `kill -9 after ${granted.size} reported grants (${released.size} released): ${checkedHeld} checked still held, max reported token ${maxToken}`,
    );
    expect(checkedHeld).toBeGreaterThan(1_000);

    const fresh = await backend.tryAcquire({ name: 'after-crash', owner: 'me', ttlMs: 1000 });
    expect(fresh.granted).toBe(true);
    if (fresh.granted) expect(fresh.grant.token).toBeGreaterThan(maxToken);
  });
});
