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
  shared: boolean;
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
    // By token: a shared name has many holders.
    const granted = new Map<bigint, Reported>();
    const releasing = new Set<bigint>();
    const released = new Set<bigint>();
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
            const [owner, token, ttlMs, wallMs, mode] = rest;
            const reported: Reported = {
              name: name!,
              owner: owner!,
              token: BigInt(token!),
              ttlMs: Number(ttlMs),
              wallMs: Number(wallMs),
              shared: mode === 'shared',
            };
            granted.set(reported.token, reported);
            if (reported.token > maxToken) maxToken = reported.token;
          } else if (kind === 'releasing') {
            releasing.add(BigInt(rest[0]!));
          } else if (kind === 'released') {
            releasing.add(BigInt(rest[0]!));
            released.add(BigInt(rest[0]!));
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
    let checkedShared = 0;
    for (const reported of granted.values()) {
      const state = await backend.inspect(reported.name);
      // The recovered holder with the reported token, if any (a shared name has many).
      const holder = state?.holders?.find((h) => h.token === reported.token);
      if (released.has(reported.token)) {
        expect(holder, `${reported.name} ${reported.token} was released`).toBeUndefined();
        continue;
      }
      if (releasing.has(reported.token)) {
        // Its release was in flight at the kill: free or still held, but by nobody else.
        if (!reported.shared && state !== null)
          expect(state).toMatchObject({ token: reported.token });
        continue;
      }
      // Recovery drops a lease only when the wall clock shows its whole TTL gone since its
      // record, which was written after the child sent the request.
      if (reopenedAt - reported.wallMs >= reported.ttlMs) continue;
      checkedHeld++;
      expect(holder, `${reported.name} ${reported.token} was reported granted`).toMatchObject({
        owner: reported.owner,
        token: reported.token,
      });
      if (reported.shared) {
        checkedShared++;
        expect(state).toMatchObject({ mode: 'shared', limit: 1000 });
        continue;
      }
      expect(state).toMatchObject({ mode: 'exclusive', owner: reported.owner });
      const other = await backend.tryAcquire({ name: reported.name, owner: 'intruder', ttlMs: 10 });
      expect(other.granted, `${reported.name} was taken from its holder`).toBe(false);
    }
    // A shared name's recovered holders are distinct, in token order, and each reported one
    // was reported for this name (a grant in flight at the kill may be held unreported).
    for (let i = 0; i < 20; i++) {
      const tokens = (await backend.inspect(`sem-${i}`))?.holders?.map((h) => h.token) ?? [];
      expect(tokens).toEqual([...tokens].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
      expect(new Set(tokens).size).toBe(tokens.length);
      for (const token of tokens) {
        if (granted.has(token)) expect(granted.get(token)!.name).toBe(`sem-${i}`);
      }
    }
    console.log(
      `kill -9 after ${granted.size} reported grants (${released.size} released): ${checkedHeld} checked still held (${checkedShared} shared), max reported token ${maxToken}`,
    );
    expect(checkedHeld).toBeGreaterThan(1_000);
    expect(checkedShared).toBeGreaterThan(300);

    const fresh = await backend.tryAcquire({ name: 'after-crash', owner: 'me', ttlMs: 1000 });
    expect(fresh.granted).toBe(true);
    if (fresh.granted) expect(fresh.grant.token).toBeGreaterThan(maxToken);
  });
});
