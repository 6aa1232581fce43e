import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { embeddedBackend } from '@dlm/adapter-embedded';
import { createClient } from '@dlm/client';
import { hashLeaseKey, type LockBackend } from '@dlm/core';
import { startServer } from '@dlm/server';
import { tempDir } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { fixtureCommand, runDlm, sleep, startDlm, useCliServer, waitForFile } from './run-dlm.js';

const cli = useCliServer();
const { env } = cli;

/**
 * Starts `dlm lock NAME FLAGS -- <the fixture command in MODE>` in a fresh directory, and resolves
 * once the command runs (it holds the lock) with what it was handed (`env.json`).
 */
async function lockedCommand(
  name: string,
  flags: string[],
  [mode, arg]: [string, (string | number)?],
  environment: NodeJS.ProcessEnv = env,
) {
  const dir = tempDir(`cli-${name.split('/').pop()}`);
  const run = startDlm(
    ['lock', name, ...flags, '--', ...fixtureCommand(dir, mode, arg)],
    environment,
  );
  const seen = JSON.parse(await waitForFile(join(dir, 'env.json')));
  return { dir, run, seen };
}

async function adminGet(name: string): Promise<Record<string, any>> {
  const response = await fetch(`${cli.server.httpUrl}/v1/locks/${encodeURIComponent(name)}`);
  return (await response.json()) as Record<string, any>;
}

describe('dlm lock NAME -- CMD', () => {
  it('runs CMD holding the lock, with DLM_LOCK_NAME and DLM_FENCING_TOKEN, then releases it and exits with its status', async () => {
    const { dir, run, seen } = await lockedCommand('cli/env', ['--ttl', '5s'], ['wait-file', 7]);
    expect(seen.name).toBe('cli/env');
    expect(seen.token).toMatch(/^[1-9]\d*$/);
    // The token CMD got is the one the server granted, to the owner CMD was told about.
    expect(await adminGet('cli/env')).toMatchObject({
      held: true,
      token: seen.token,
      owner: seen.owner,
    });

    writeFileSync(join(dir, 'go'), '');
    const done = await run.finished;
    expect(done.code).toBe(7);
    expect(await adminGet('cli/env')).toMatchObject({ held: false });
  });

  it('hands CMD the fencing token, never the lease key', async () => {
    // The key's hash as the backend gets it: the only way to recognise the key from outside.
    const base = await embeddedBackend();
    const hashes: string[] = [];
    const backend: LockBackend = {
      ...base,
      tryAcquire: (request) => {
        if (request.keyHash !== undefined) hashes.push(request.keyHash);
        return base.tryAcquire(request);
      },
    };
    const own = await startServer({ port: 0, backend });
    try {
      const { dir, run, seen } = await lockedCommand('cli/key', [], ['wait-file', 0], {
        DLM_URL: own.url,
      });
      expect(seen.token).toMatch(/^[1-9]\d*$/);
      expect(hashes).toHaveLength(1);
      const handed: string[] = [...Object.values<string>(seen.environment), ...seen.argv];
      expect(handed).toContain(seen.token);
      for (const value of handed) {
        for (const part of [value, ...value.split(/[^A-Za-z0-9_-]+/)]) {
          expect(hashLeaseKey(part)).not.toBe(hashes[0]);
        }
      }
      writeFileSync(join(dir, 'go'), '');
      const done = await run.finished;
      expect(done.code).toBe(0);
      for (const output of [done.stdout, done.stderr]) {
        for (const part of output.split(/[^A-Za-z0-9_-]+/)) {
          expect(hashLeaseKey(part)).not.toBe(hashes[0]);
        }
      }
    } finally {
      await own.close();
      await base.close();
    }
  });

  it('exits 0 when CMD does, and 128+N when a signal kills CMD', async () => {
    const ok = await runDlm(
      ['lock', 'cli/status', '--', process.execPath, '-e', 'process.exit(0)'],
      env,
    );
    expect(ok.code).toBe(0);
    const killed = await runDlm(
      ['lock', 'cli/status', '--', process.execPath, '-e', 'process.kill(process.pid, "SIGKILL")'],
      env,
    );
    expect(killed.code).toBe(137);
    expect((await adminGet('cli/status')).held).toBe(false);
  });

  it('renews the lease while CMD outlives its TTL', async () => {
    const { run, seen } = await lockedCommand('cli/renew', ['--ttl', '400ms'], ['sleep', 1_500]);
    await sleep(1_000);
    // Well past the TTL, the same lease still holds it.
    expect(await adminGet('cli/renew')).toMatchObject({ held: true, token: seen.token });
    expect(await cli.client.tryAcquire('cli/renew', { ttlMs: 1_000 })).toBeNull();
    const done = await run.finished;
    expect(done.code).toBe(0);
    expect(done.stderr).toBe('');
  });

  it('a revoked lock stops CMD with SIGTERM and exits 123', async () => {
    const { dir, run, seen } = await lockedCommand('cli/revoke', [], ['trap-term']);
    const response = await fetch(`${cli.server.httpUrl}/v1/locks/cli%2Frevoke`, {
      method: 'DELETE',
    });
    expect(response.status).toBe(200);
    const done = await run.finished;
    expect(done.code).toBe(123);
    expect(readFileSync(join(dir, 'terminated'), 'utf8')).toBe('SIGTERM');
    expect(done.stderr).toContain('lost lock cli/revoke (revoked)');
    // The revoked lease is not released again by dlm: the lock stays free for the next owner.
    const after = await adminGet('cli/revoke');
    expect(after.held === false || after.token !== seen.token).toBe(true);
  });

  it('a CMD that ignores SIGTERM is killed after the grace period', async () => {
    const dir = tempDir('cli-grace');
    const run = startDlm(
      ['lock', 'cli/grace', '--grace', '300ms', '--', ...fixtureCommand(dir, 'ignore-term')],
      env,
    );
    await waitForFile(join(dir, 'env.json'));
    const revokedAt = Date.now();
    await fetch(`${cli.server.httpUrl}/v1/locks/cli%2Fgrace`, { method: 'DELETE' });
    const done = await run.finished;
    expect(done.code).toBe(123);
    expect(existsSync(join(dir, 'ignored'))).toBe(true);
    expect(done.stderr).toContain('SIGKILL');
    expect(Date.now() - revokedAt).toBeGreaterThanOrEqual(300);
    expect(Date.now() - revokedAt).toBeLessThan(5_000);
  });

  it('waits for the holder, then runs CMD with a higher token', async () => {
    const holder = await cli.client.acquire('cli/queue', { ttlMs: 10_000 });
    const dir = tempDir('cli-queue');
    const run = startDlm(
      ['lock', 'cli/queue', '--wait', '5s', '--', ...fixtureCommand(dir, 'sleep', 0)],
      env,
    );
    await sleep(300);
    expect(existsSync(join(dir, 'env.json'))).toBe(false);
    await holder.release();
    const done = await run.finished;
    expect(done.code).toBe(0);
    const seen = JSON.parse(readFileSync(join(dir, 'env.json'), 'utf8'));
    expect(BigInt(seen.token)).toBeGreaterThan(holder.token);
  });

  it('exits 124 without running CMD when --wait runs out', async () => {
    const holder = await cli.client.acquire('cli/busy', { ttlMs: 10_000 });
    const dir = tempDir('cli-busy');
    const startedAt = Date.now();
    const done = await runDlm(
      ['lock', 'cli/busy', '--wait', '300ms', '--', ...fixtureCommand(dir, 'sleep', 0)],
      env,
    );
    expect(done.code).toBe(124);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(300);
    expect(existsSync(join(dir, 'env.json'))).toBe(false);
    expect(done.stderr).toContain('lock cli/busy is held by another owner (waited 300ms)');
    const tryOnce = await runDlm(['lock', 'cli/busy', '--wait', '0', '--', 'true'], env);
    expect(tryOnce.code).toBe(124);
    await holder.release();
  });

  it('exits 127 for a command that does not exist, and releases the lock', async () => {
    const done = await runDlm(['lock', 'cli/missing', '--', '/nonexistent/command'], env);
    expect(done.code).toBe(127);
    expect(done.stderr).toContain('cannot run /nonexistent/command');
    expect((await adminGet('cli/missing')).held).toBe(false);
  });

  it('takes CMD without -- too, and rejects bad usage with exit 2', async () => {
    const plain = await runDlm(
      ['lock', '--ttl', '2s', 'cli/plain', process.execPath, '-e', 'process.exit(3)'],
      env,
    );
    expect(plain.code).toBe(3);
    for (const args of [
      ['lock', 'cli/x'],
      ['lock', '--', 'true'],
      ['lock', 'cli/x', '--ttl', '10 parsecs', '--', 'true'],
      ['lock', 'cli/x', '--ttl', '30', '--', 'true'],
      ['lock', 'cli/x', '--bogus', '--', 'true'],
    ]) {
      const done = await runDlm(args, env);
      expect(done.code, args.join(' ')).toBe(2);
      // The reason and where the help is, not the whole help after it.
      expect(done.stderr, args.join(' ')).toMatch(
        /^dlm lock: .+\nRun 'dlm lock --help' for its usage\.\n$/,
      );
    }
    // Each reason once, in a few words (not "dlm lock: dlm lock takes…", nor parseArgs' advice).
    const said = async (...args: string[]) => (await runDlm(args, env)).stderr.split('\n')[0];
    expect(await said('lock')).toBe('dlm lock: a lock NAME is missing');
    expect(await said('lock', 'cli/x', '--bogus', '--', 'true')).toBe(
      'dlm lock: unknown option --bogus',
    );
    expect(await said('lock', 'cli/x', '--ttl')).toBe('dlm lock: --ttl needs a value');
    expect(await said('get')).toBe('dlm get: a lock NAME is missing');
    expect(await said('get', 'a', 'b')).toBe('dlm get: one lock NAME at a time (got "a" "b")');
    // A bare number has no unit to guess: the error names the units.
    const bare = await runDlm(['lock', 'cli/x', '--wait', '30', '--', 'true'], env);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain(
      'dlm lock: --wait must be a duration with a unit (ms, s, m or h), like 30s or 30ms, got "30"',
    );
  });

  it('says in the units the user typed what is out of range, before connecting (exit 2)', async () => {
    const cases: Array<[string[], string]> = [
      [['--ttl', '50ms'], '--ttl must be between 100ms and 24h, got 50ms'],
      [['--ttl', '25h'], '--ttl must be between 100ms and 24h, got 25h'],
      [['--wait', '6m'], '--wait must be between 0 and 5m, got 6m'],
    ];
    for (const [flags, message] of cases) {
      // No server at all: the check must not need one.
      const done = await runDlm(['lock', 'cli/range', ...flags, '--', 'true'], {
        DLM_URL: 'ws://127.0.0.1:9/v1/ws',
      });
      expect(done.code, flags.join(' ')).toBe(2);
      expect(done.stderr.trim()).toBe(`dlm lock: ${message}`);
    }
  });
});

describe('dlm lock with the server down', () => {
  it('says what it waits for after a second, and gives up with the reason after about 10 s (125)', async () => {
    const server = await startServer({ port: 0 });
    const url = `ws://127.0.0.1:${server.port}`;
    await server.close();
    const started = Date.now();
    const done = await runDlm(['lock', 'cli/down', '--wait', '0', '--server', url, '--', 'true']);
    const elapsedMs = Date.now() - started;
    expect(done.code).toBe(125);
    const lines = done.stderr.trim().split('\n');
    expect(lines[0]).toBe(`dlm: waiting for ${url} (connection refused), retrying`);
    expect(lines.at(-1)).toMatch(
      /within 10000 ms: connection refused \(connect ECONNREFUSED .*\) \(UNAVAILABLE\)$/,
    );
    // What the README says: about 10 s plus --wait (here 0), not three tries of it.
    expect(elapsedMs).toBeGreaterThan(9_000);
    expect(elapsedMs).toBeLessThan(14_000);
  }, 30_000);

  it('says it has no answer yet when the connection hangs, and gives up after about 10 s', async () => {
    const { createServer } = await import('node:net');
    const sockets: import('node:net').Socket[] = [];
    // Accepts TCP connections and never answers the WebSocket upgrade.
    const silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as import('node:net').AddressInfo).port;
    try {
      const url = `ws://127.0.0.1:${port}`;
      const started = Date.now();
      const done = await runDlm(['lock', 'cli/hang', '--wait', '0', '--server', url, '--', 'true']);
      expect(done.code).toBe(125);
      expect(done.stderr.split('\n')[0]).toBe(`dlm: waiting for ${url} (no answer yet)`);
      expect(done.stderr).toMatch(/no session with .* within 10000 ms/);
      expect(Date.now() - started).toBeLessThan(14_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  }, 30_000);

  it('a --server without a scheme is a usage error that says what was meant', async () => {
    const done = await runDlm(['lock', 'cli/x', '--server', 'localhost:7171', '--', 'true']);
    expect(done.code).toBe(2);
    expect(done.stderr).toContain('did you mean ws://localhost:7171?');
  });
});

describe('dlm lock NAME1 NAME2 ... -- CMD', () => {
  it('takes every lock, hands CMD DLM_FENCING_TOKENS in the order given, and releases them all', async () => {
    const names = ['cli/several/c', 'cli/several/a', 'cli/several/b'];
    const { dir, run, seen } = await lockedCommand(
      names[0]!,
      [...names.slice(1), '--ttl', '5s'],
      ['wait-file', 0],
    );
    const pairs = (seen.tokens as string).split(',').map((pair) => pair.split('='));
    expect(pairs.map(([name]) => name)).toEqual(names);
    // One name's variables are for one name: with several, CMD gets the pairs only.
    expect(seen.name).toBeUndefined();
    expect(seen.token).toBeUndefined();
    for (const [name, token] of pairs) {
      expect(token).toMatch(/^[1-9]\d*$/);
      expect(await adminGet(name!)).toMatchObject({ held: true, token, owner: seen.owner });
    }
    writeFileSync(join(dir, 'go'), '');
    expect((await run.finished).code).toBe(0);
    for (const name of names) expect((await adminGet(name)).held).toBe(false);
  });

  it('takes none when one is held: exit 124 naming it, CMD not run, the others free', async () => {
    const holder = await cli.client.acquire('cli/some/b', { ttlMs: 10_000 });
    const dir = tempDir('cli-some');
    const done = await runDlm(
      [
        'lock',
        'cli/some/a',
        'cli/some/b',
        'cli/some/c',
        '--wait',
        '300ms',
        '--',
        ...fixtureCommand(dir, 'sleep', 0),
      ],
      env,
    );
    expect(done.code).toBe(124);
    expect(done.stderr).toContain('lock cli/some/b is held by another owner (waited 300ms)');
    expect(existsSync(join(dir, 'env.json'))).toBe(false);
    expect((await adminGet('cli/some/a')).held).toBe(false);
    expect((await adminGet('cli/some/c')).held).toBe(false);
    await holder.release();
  });

  it('stops CMD and exits 123 when any one of them is revoked', async () => {
    const { dir, run } = await lockedCommand('cli/rev/a', ['cli/rev/b'], ['trap-term']);
    await fetch(`${cli.server.httpUrl}/v1/locks/cli%2Frev%2Fb`, { method: 'DELETE' });
    const done = await run.finished;
    expect(done.code).toBe(123);
    expect(readFileSync(join(dir, 'terminated'), 'utf8')).toBe('SIGTERM');
    expect(done.stderr).toContain('lost lock cli/rev/b (revoked)');
    expect((await adminGet('cli/rev/a')).held).toBe(false);
  });

  it('refuses, before connecting (exit 2), a NAME with "," or "=" among several, and a NAME twice', async () => {
    for (const args of [
      ['lock', 'cli/x', 'cli/y,z', '--', 'true'],
      ['lock', 'cli/x', 'cli/y=z', '--', 'true'],
      ['lock', 'cli/x', 'cli/x', '--', 'true'],
    ]) {
      const done = await runDlm(args, { DLM_URL: 'ws://127.0.0.1:1' });
      expect(done.code, args.join(' ')).toBe(2);
    }
    // One name may contain them: it goes to CMD as DLM_LOCK_NAME, not in pairs.
    const single = await runDlm(['lock', 'cli/one,=name', '--', 'true'], env);
    expect(single.code).toBe(0);
  });
});

describe('dlm lock and release requests', () => {
  it('a waiting dlm lock --request-release asks the holder; its CMD gets SIGTERM, exits, and the lock passes on', async () => {
    const name = 'cli/asked';
    const { dir, run } = await lockedCommand(name, ['--ttl', '30s'], ['trap-term']);
    const waiter = await runDlm(
      ['lock', name, '--wait', '20s', '--request-release', '--', 'node', '-e', ''],
      env,
    );
    expect(waiter.code).toBe(0);
    const done = await run.finished;
    expect(readFileSync(join(dir, 'terminated'), 'utf8')).toBe('SIGTERM');
    // CMD stopped when asked and exited 0: dlm released the lock and exits with CMD's status.
    expect(done.code).toBe(0);
    expect(done.stderr).toContain(`release of ${name} requested; sending SIGTERM to the command`);
  });

  it('--on-release-request USR1 forwards that signal, with the reason, on a request from another client', async () => {
    const name = 'cli/asked-usr1';
    const { dir, run } = await lockedCommand(name, ['--on-release-request', 'USR1'], ['trap-usr1']);
    const client = createClient({ url: cli.server.url });
    try {
      expect(await client.requestRelease(name, { reason: 'maintenance' })).toEqual({
        name,
        notified: 1,
      });
    } finally {
      await client.close();
    }
    const done = await run.finished;
    expect(readFileSync(join(dir, 'terminated'), 'utf8')).toBe('SIGUSR1');
    expect(done.code).toBe(0);
    expect(done.stderr).toContain('(maintenance); sending SIGUSR1 to the command');
    expect(await adminGet(name)).toMatchObject({ held: false });
  });

  it('dlm request-release NAME --reason asks the holder (its CMD gets SIGTERM); a free name asks nobody; a long reason is a usage error', async () => {
    const name = 'cli/asked-by-command';
    const { dir, run } = await lockedCommand(name, [], ['trap-term']);
    const asked = await runDlm(['request-release', name, '--reason', 'rotate', '--json'], env);
    expect(asked.code).toBe(0);
    expect(JSON.parse(asked.stdout)).toEqual({ name, notified: 1 });
    const done = await run.finished;
    expect(readFileSync(join(dir, 'terminated'), 'utf8')).toBe('SIGTERM');
    expect(done.stderr).toContain('(rotate); sending SIGTERM');
    const free = await runDlm(['request-release', 'cli/nobody'], env);
    expect(free).toMatchObject({ code: 0, stdout: 'cli/nobody: free, nobody to ask\n' });
    const long = await runDlm(['request-release', name, '--reason', 'x'.repeat(257)], env);
    expect(long.code).toBe(2);
    expect(long.stderr).toContain('--reason must be 1-256 UTF-8 bytes');
  });

  it('--on-release-request none leaves CMD alone; a bad signal name is a usage error', async () => {
    const name = 'cli/asked-none';
    const { dir, run } = await lockedCommand(
      name,
      ['--on-release-request', 'none'],
      ['wait-file', 0],
    );
    const client = createClient({ url: cli.server.url });
    try {
      expect((await client.requestRelease(name)).notified).toBe(1);
      await sleep(500);
      // Still running (SIGTERM would have killed this mode): still held.
      expect(await adminGet(name)).toMatchObject({ held: true });
    } finally {
      await client.close();
    }
    writeFileSync(join(dir, 'go'), '');
    expect((await run.finished).code).toBe(0);
    const bad = await runDlm(['lock', 'cli/x', '--on-release-request', 'NOPE', '--', 'true'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--on-release-request must be a signal name');
  });
});
