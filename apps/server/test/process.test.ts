import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  findBinary,
  freePort,
  type ManagedProcess,
  startProcess,
  tempDir,
} from '@dlm/test-services';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect, openSession } from './ws-peer.js';

// These tests run the built server (`dist/main.js`) as its own OS process, so that kill -9
// and signals hit a real server. `pnpm test` builds first.
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

const running: ManagedProcess[] = [];
afterEach(async () => {
  for (const proc of running.splice(0)) await proc.kill();
});

beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (pnpm build)`);
});

async function serve(args: string[], env: NodeJS.ProcessEnv = {}) {
  const port = await freePort();
  const proc = await startProcess({
    name: 'dlm-server',
    command: process.execPath,
    args: [MAIN, '--port', String(port), '--log-level', 'warn', ...args],
    env,
    ready: async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok,
  });
  running.push(proc);
  return { proc, port, url: `ws://127.0.0.1:${port}/v1/ws` };
}

describe('the server process on the embedded backend with a data directory', () => {
  it('after kill -9 tokens keep increasing and a held lock is not granted to another owner', async () => {
    const dataDir = tempDir('server-kill9');
    const first = await serve(['--data-dir', dataDir]);
    let peer = await openSession(first.url);
    const tokens: bigint[] = [];
    for (let i = 0; i < 5; i += 1) {
      const lease = (await peer.call('lock.acquire', { name: 'cycled', ttlMs: 5_000 })).result;
      tokens.push(BigInt(lease.token));
      await peer.call('lock.release', { name: 'cycled', token: lease.token });
    }
    const held = (await peer.call('lock.acquire', { name: 'held', ttlMs: 60_000, owner: 'holder' }))
      .result;
    await first.proc.kill();

    const again = await startProcess({
      name: 'dlm-server',
      command: process.execPath,
      args: [MAIN, '--port', String(first.port), '--log-level', 'warn', '--data-dir', dataDir],
      ready: async () => (await fetch(`http://127.0.0.1:${first.port}/healthz`)).ok,
    });
    running.push(again);
    peer = await openSession(first.url);
    const next = (await peer.call('lock.acquire', { name: 'cycled', ttlMs: 5_000 })).result;
    expect(BigInt(next.token)).toBeGreaterThan(tokens.at(-1)!);
    expect(BigInt(next.token)).toBeGreaterThan(BigInt(held.token));
    const intruder = await peer.call('lock.acquire', {
      name: 'held',
      ttlMs: 5_000,
      owner: 'intruder',
    });
    expect(intruder.error?.data.code).toBe('LOCK_HELD');
    expect(intruder.error.data.ttlRemainingMs).toBeGreaterThan(50_000);
    // A new server process: the token alone is not enough, the lease key (journaled as its
    // hash) still is.
    expect(
      (await peer.call('lock.release', { name: 'held', token: held.token })).error?.data.code,
    ).toBe('NOT_HOLDER');
    expect(
      (
        await peer.call('lock.release', {
          name: 'held',
          token: held.token,
          leaseKey: held.leaseKey,
        })
      ).result,
    ).toEqual({ released: true });
    peer.close();
  });

  it('a start that fails (its port taken) exits 1 and leaves its data dir as it found it, unlocked', async () => {
    const taken = await serve(['--memory']);
    const dataDir = tempDir('server-port-taken');
    const { spawnSync } = await import('node:child_process');
    const args = [MAIN, '--port', String(taken.port), '--data-dir', dataDir];
    const failed = spawnSync(process.execPath, args, { encoding: 'utf8' });
    expect(failed.status).toBe(1);
    expect(failed.stderr).toMatch(/EADDRINUSE/);
    expect(existsSync(join(dataDir, 'LOCK'))).toBe(false);
  });

  it('SIGTERM ends pending waits with CANCELLED, exits 0, and keeps held locks for the next start', async () => {
    const dataDir = tempDir('server-sigterm');
    const server = await serve(['--data-dir', dataDir]);
    const peer = await openSession(server.url);
    const held = (await peer.call('lock.acquire', { name: 'kept', ttlMs: 60_000, owner: 'holder' }))
      .result;
    const waiting = peer.call('lock.acquire', { name: 'kept', ttlMs: 1_000, waitMs: 30_000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await server.proc.stop(5_000);
    expect((await waiting).error?.data.code).toBe('CANCELLED');

    const restarted = await serve(['--data-dir', dataDir]);
    const after = await openSession(restarted.url);
    expect((await after.call('lock.get', { name: 'kept' })).result).toMatchObject({
      held: true,
      owner: 'holder',
      token: held.token,
    });
    after.close();
  });

  it.skipIf(findBinary('script') === null)(
    'at a terminal it also says, in one plain line, where it listens and where the data is',
    async () => {
      const dataDir = tempDir('server-tty');
      const port = await freePort();
      const plain = `dlm listening on ws://127.0.0.1:${port}/v1/ws, embedded backend, data in ${dataDir}; dashboard at http://127.0.0.1:${port}/`;
      // util-linux `script` gives the server a pseudo-terminal and copies what it prints.
      const { spawn } = await import('node:child_process');
      const command = `exec ${process.execPath} ${MAIN} --port ${port} --data-dir ${dataDir}`;
      const atTerminal = spawn('script', ['-qfec', command, '/dev/null'], { detached: true });
      let printed = '';
      try {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no plain line:\n${printed}`)), 10_000);
          atTerminal.stdout.on('data', (chunk: Buffer) => {
            printed += chunk.toString();
            if (!printed.includes(plain)) return;
            clearTimeout(timer);
            resolve();
          });
        });
      } finally {
        const exited = new Promise((resolve) => atTerminal.once('exit', resolve));
        process.kill(-atTerminal.pid!, 'SIGTERM');
        await exited;
      }
      // The JSON lines stay, for the log collector; without a terminal there is no plain line.
      expect(printed).toMatch(/"msg":"listening"/);
      const piped = await serve(['--memory']);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(piped.proc.output()).not.toMatch(/dlm listening on/);
    },
  );

  it('keeps its data under $XDG_STATE_HOME/dlm by default, and nothing with --memory', async () => {
    const state = tempDir('server-state');
    const byDefault = await serve([], { XDG_STATE_HOME: state, DLM_DATA_DIR: '' });
    const peer = await openSession(byDefault.url);
    await peer.call('lock.acquire', { name: 'x', ttlMs: 5_000 });
    peer.close();
    expect(readdirSync(join(state, 'dlm')).length).toBeGreaterThan(0);

    const memoryState = tempDir('server-memory');
    const inMemory = await serve(['--memory'], { XDG_STATE_HOME: memoryState });
    const other = await openSession(inMemory.url);
    await other.call('lock.acquire', { name: 'x', ttlMs: 5_000 });
    other.close();
    expect(existsSync(join(memoryState, 'dlm'))).toBe(false);
  });

  it('takes its flags with or without the `--` that `pnpm start -- --memory` passes on', async () => {
    const state = tempDir('server-dashdash');
    for (const args of [['--', '--memory', '--log-level', 'warn'], ['--memory']]) {
      // `node main.js -- --memory`, as pnpm runs it: flags after a `--` used to be positionals,
      // and the server exited 2 on them.
      const port = await freePort();
      const proc = await startProcess({
        name: 'dlm-server',
        command: process.execPath,
        args: [MAIN, ...args],
        env: { DLM_PORT: String(port), XDG_STATE_HOME: state, DLM_DATA_DIR: '' },
        ready: async () => (await fetch(`http://127.0.0.1:${port}/livez`)).ok,
      });
      running.push(proc);
      const peer = await openSession(`ws://127.0.0.1:${port}/v1/ws`);
      expect((await peer.call('lock.acquire', { name: 'x', ttlMs: 5_000 })).result.token).toBe('1');
      peer.close();
      await proc.kill();
    }
    // --memory took effect both times: nothing was written under the state directory.
    expect(existsSync(join(state, 'dlm'))).toBe(false);
  });

  it('a flag for another backend than the chosen one exits 2 with one line saying so', async () => {
    const { spawnSync } = await import('node:child_process');
    const cases: Array<[string[], RegExp]> = [
      [
        ['--memory', '--backend', 'redis', '--redis-url', 'redis://127.0.0.1:1'],
        /--memory is for --backend embedded, but the backend is redis/,
      ],
      [
        ['--redis-url', 'redis://127.0.0.1:1'],
        /--redis-url is for --backend redis, but the backend is embedded \(the default\)/,
      ],
      [
        [
          '--backend',
          'etcd',
          '--etcd-endpoints',
          'http://127.0.0.1:1',
          '--zk-connect',
          '127.0.0.1:1',
        ],
        /--zk-connect is for --backend zookeeper, but the backend is etcd/,
      ],
      [
        ['--backend', 'redis', '--postgres-url', 'postgres://x'],
        /^dlm-server: --postgres-url is for --backend postgres, but the backend is redis$/,
      ],
      [
        ['--backend', 'postgres', '--postgres-url', 'postgres://x', '--memory'],
        /^dlm-server: --memory is for --backend embedded, but the backend is postgres$/,
      ],
    ];
    for (const [args, message] of cases) {
      const result = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'utf8' });
      expect(result.status).toBe(2);
      expect(result.stderr.split('\n')[0]).toMatch(message);
    }
  });

  it('a bad flag exits 2 with the reason and where the help is (not the whole help)', async () => {
    const { spawnSync } = await import('node:child_process');
    const result = spawnSync(process.execPath, [MAIN, '--backend', 'mongo'], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(
      /^dlm-server: --backend must be .*\nRun 'dlm-server --help' for its usage\.\n$/,
    );
  });
});

describe('the server process with tokens', () => {
  it('--new-token prints a token and its SHA-256; --auth-file takes it; a wrong one is closed with 4004', async () => {
    const { spawnSync } = await import('node:child_process');
    const { createHash } = await import('node:crypto');
    const made = spawnSync(process.execPath, [MAIN, '--new-token'], { encoding: 'utf8' });
    expect(made.status).toBe(0);
    const token = /^token: +(\S+)$/m.exec(made.stdout)![1]!;
    const sha256 = /^sha256: +([0-9a-f]{64})$/m.exec(made.stdout)![1]!;
    expect(createHash('sha256').update(token).digest('hex')).toBe(sha256);

    const file = join(tempDir('server-auth'), 'tokens.txt');
    writeFileSync(file, `ops ${sha256} lock,watch,admin\n`);
    const server = await serve(['--memory', '--auth-file', file]);
    const ok = await connect(server.url);
    expect((await ok.hello(token)).sessionId).toBeTruthy();
    ok.close();
    const refused = await connect(server.url);
    const reply = await refused.call('session.hello', { auth: `${token}x` });
    expect(reply.error.data.code).toBe('UNAUTHENTICATED');
    expect((await refused.closed).code).toBe(4004);
    const metrics = await fetch(`http://127.0.0.1:${server.port}/metrics`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(metrics.status).toBe(200);
  });

  it('without tokens it will not listen beyond loopback: exits 1 unless --insecure', async () => {
    const { spawnSync } = await import('node:child_process');
    const result = spawnSync(
      process.execPath,
      [MAIN, '--memory', '--host', '0.0.0.0', '--port', '0'],
      {
        encoding: 'utf8',
        timeout: 20_000,
      },
    );
    expect(result.status).toBe(1);
    expect(result.stderr).toContain('refusing to listen on 0.0.0.0 without authentication');
    const insecure = await serve(['--memory', '--host', '0.0.0.0', '--insecure']);
    expect(insecure.proc.output()).toContain('no authentication on a non-loopback address');
  });
});
