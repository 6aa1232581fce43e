import { freePort } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { jsonLines, type Running, runDlm, startDlm, useCliServer } from './run-dlm.js';

/** Polls `url` until it answers 200; throws with the process's stderr if it exits or 15 s pass. */
async function untilAnswering(serve: Running, url: string, what: string): Promise<void> {
  const answers = () =>
    fetch(url).then(
      (response) => response.ok,
      () => false,
    );
  const deadline = Date.now() + 15_000;
  while (!(await answers())) {
    if (Date.now() > deadline || serve.child.exitCode !== null)
      throw new Error(`${what} did not start:\n${serve.stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const cli = useCliServer();
const { env } = cli;

describe('dlm get', () => {
  it('says free or who holds it, and --json gives the fields with the token as a string', async () => {
    const free = await runDlm(['get', 'get/a'], env);
    expect(free).toMatchObject({ code: 0, stdout: 'get/a: free\n' });

    const lease = await cli.client.acquire('get/a', { ttlMs: 60_000, owner: 'worker-9' });
    const asked = Date.now();
    const held = await runDlm(['get', 'get/a'], env);
    const tookS = Math.ceil((Date.now() - asked) / 1000);
    expect(held.code).toBe(0);
    // `Ns left` in whole seconds, 1m00s when none has passed; a loaded machine's process start
    // may take a few of them, so the bound is what the call took.
    const left = new RegExp(`^get/a: held by worker-9, token ${lease.token}, (\\d+)s left\\n$`);
    const seconds =
      held.stdout === `get/a: held by worker-9, token ${lease.token}, 1m00s left\n`
        ? 60
        : Number(left.exec(held.stdout)?.[1]);
    expect(seconds, held.stdout).toBeGreaterThanOrEqual(59 - tookS);
    expect(seconds, held.stdout).toBeLessThanOrEqual(60);
    const json = await runDlm(['get', 'get/a', '--json', '--server', cli.server.url], {});
    expect(JSON.parse(json.stdout)).toMatchObject({
      name: 'get/a',
      held: true,
      owner: 'worker-9',
      token: lease.token.toString(),
    });
    await lease.release();
  });

  it('exits 1 when the server cannot be reached', async () => {
    const port = await freePort();
    const done = await runDlm(['get', 'x', '--server', `ws://127.0.0.1:${port}`]);
    expect(done.code).toBe(1);
    // In the user's words: no client option ("reconnect is off") in it.
    expect(done.stderr).toBe(
      `dlm: no connection to the dlm server at ws://127.0.0.1:${port}/v1/ws: connection refused (connect ECONNREFUSED 127.0.0.1:${port}) (UNAVAILABLE)\n`,
    );
  });
});

describe('dlm check', () => {
  it('exits 0 while the token holds the lock, 1 once it does not, with --json', async () => {
    const lease = await cli.client.acquire('check/a', { ttlMs: 60_000, owner: 'worker-3' });
    const current = await runDlm(['check', 'check/a', lease.token.toString()], env);
    expect(current).toMatchObject({
      code: 0,
      stdout: `check/a: token ${lease.token} holds it\n`,
    });
    const other = await runDlm(['check', 'check/a', (lease.token + 1n).toString(), '--json'], env);
    expect(other.code).toBe(1);
    expect(JSON.parse(other.stdout)).toEqual({
      name: 'check/a',
      token: (lease.token + 1n).toString(),
      current: false,
    });
    await lease.release();
    const released = await runDlm(['check', 'check/a', lease.token.toString()], env);
    expect(released).toMatchObject({
      code: 1,
      stdout: `check/a: token ${lease.token} does not hold it\n`,
    });
  });

  it('a malformed or missing TOKEN exits 2; no server exits 125', async () => {
    const bad = await runDlm(['check', 'check/a', '007'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('TOKEN must be a fencing token');
    expect((await runDlm(['check', 'check/a'], env)).stderr).toContain('a TOKEN is missing');
    const port = await freePort();
    const down = await runDlm(['check', 'x', '1', '--server', `ws://127.0.0.1:${port}`]);
    expect(down.code).toBe(125);
  });
});

describe('dlm ls', () => {
  it('lists held locks as a table, filtered by prefix, or as JSON', async () => {
    const a = await cli.client.acquire('ls/alpha', { ttlMs: 60_000, owner: 'o-alpha' });
    const b = await cli.client.acquire('ls/beta', { ttlMs: 30_000, owner: 'o-beta' });
    const c = await cli.client.acquire('other/gamma', { ttlMs: 30_000 });

    const table = await runDlm(['ls', '--prefix', 'ls/'], env);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+OWNER\s+TOKEN\s+TTL\s+WAITERS$/);
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(
      new RegExp(`^ls/alpha\\s+o-alpha\\s+${a.token}\\s+(\\d+s|1m00s)\\s+0$`),
    );
    expect(lines[2]).toMatch(/^ls\/beta\s+o-beta\s/);

    const json = JSON.parse((await runDlm(['ls', '--json'], env)).stdout);
    const names = json.locks.map((lock: { name: string }) => lock.name);
    expect(names).toEqual(expect.arrayContaining(['ls/alpha', 'ls/beta', 'other/gamma']));
    expect(json.locks.find((lock: { name: string }) => lock.name === 'ls/beta')).toMatchObject({
      owner: 'o-beta',
      token: b.token.toString(),
      waiters: 0,
    });

    const none = await runDlm(['ls', '--prefix', 'nothing/'], env);
    expect(none.stdout).toBe('no locks held under nothing/\n');
    await Promise.all([a.release(), b.release(), c.release()]);
  });
});

describe('dlm watch', () => {
  it('prints the state, then each change as it happens, until interrupted', async () => {
    const watch = startDlm(['watch', 'watch/a', '--json'], env);
    await watch.waitForOutput(/"held":false/);
    const lease = await cli.client.acquire('watch/a', { ttlMs: 10_000, owner: 'w-1' });
    await watch.waitForOutput(/"held":true/);
    await lease.release();
    await watch.waitForOutput(/"held":true.*\n.*"held":false/s);
    watch.child.kill('SIGINT');
    const done = await watch.finished;
    expect(done.code).toBe(0);
    const changes = jsonLines(done.stdout);
    expect(changes.map((change) => change.held)).toEqual([false, true, false]);
    expect(changes[1]).toMatchObject({
      name: 'watch/a',
      owner: 'w-1',
      token: lease.token.toString(),
    });
    expect(Date.parse(changes[1].time)).not.toBeNaN();
  });

  it('prints one readable line per change by default', async () => {
    const watch = startDlm(['watch', 'watch/b'], env);
    await watch.waitForOutput(/watch\/b {2}free/);
    const lease = await cli.client.acquire('watch/b', { ttlMs: 10_000, owner: 'w-2' });
    await watch.waitForOutput(new RegExp(`watch/b {2}held by w-2 \\(token ${lease.token}\\)`));
    watch.child.kill('SIGTERM');
    expect((await watch.finished).code).toBe(0);
    await lease.release();
  });
});

describe('dlm serve', () => {
  it('runs the server with dlm-server’s flags and stops cleanly on SIGTERM', async () => {
    const port = await freePort();
    const serve = startDlm(['serve', '--port', String(port), '--memory', '--log-level', 'info']);
    const url = `ws://127.0.0.1:${port}/v1/ws`;
    await untilAnswering(serve, `http://127.0.0.1:${port}/healthz`, 'dlm serve');
    const get = await runDlm(['get', 'served', '--server', url]);
    expect(get.stdout).toBe('served: free\n');
    serve.child.kill('SIGTERM');
    const done = await serve.finished;
    expect(done.code).toBe(0);
    const logs = jsonLines(done.stderr);
    expect(logs.map((line) => line.msg)).toEqual(
      expect.arrayContaining(['listening', 'session opened', 'shutting down', 'stopped']),
    );
  });

  it('takes the `--` that `pnpm dlm -- serve …` and `dlm serve -- …` pass on', async () => {
    for (const args of [
      ['--', 'serve', '--memory'],
      ['serve', '--', '--memory'],
    ]) {
      const port = await freePort();
      const serve = startDlm([...args, '--port', String(port), '--log-level', 'warn']);
      await untilAnswering(serve, `http://127.0.0.1:${port}/readyz`, `dlm ${args.join(' ')}`);
      serve.child.kill('SIGTERM');
      expect((await serve.finished).code).toBe(0);
    }
  });

  it('a bad flag exits 2 with the reason and where the help is', async () => {
    const done = await runDlm(['serve', '--backend', 'mongo']);
    expect(done.code).toBe(2);
    expect(done.stderr).toMatch(
      /^dlm serve: --backend must be .*\nRun 'dlm serve --help' for its usage\.\n$/,
    );
  });
});

describe('help', () => {
  it('every command has --help, exiting 0', async () => {
    for (const command of ['lock', 'get', 'check', 'ls', 'watch', 'serve']) {
      const done = await runDlm([command, '--help']);
      expect(done.code, command).toBe(0);
      expect(done.stdout).toContain(`Usage: dlm ${command}`);
    }
    const top = await runDlm(['--help']);
    expect(top.code).toBe(0);
    for (const command of ['lock', 'get', 'check', 'ls', 'watch', 'serve']) {
      expect(top.stdout).toContain(`  ${command} `);
    }
    expect((await runDlm(['help', 'ls'])).stdout).toContain('Usage: dlm ls');
  });

  it('an unknown command or a missing one exits 2', async () => {
    const unknown = await runDlm(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe(
      `dlm: unknown command "frobnicate"\nRun 'dlm --help' for its usage.\n`,
    );
    expect((await runDlm([])).code).toBe(2);
    expect((await runDlm(['--version'])).stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
  });

  it('a leading -- (as pnpm dlm -- … passes it on) is not a command', async () => {
    expect((await runDlm(['--', '--version'])).stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
    const get = await runDlm(['--', 'get', 'dashdash', '--server', cli.server.url]);
    expect(get).toMatchObject({ code: 0, stdout: 'dashdash: free\n' });
    // Only before the command: after it, `--` keeps its meaning (dlm lock NAME -- CMD).
    expect((await runDlm(['--', '--', 'get', 'x'])).code).toBe(2);
  });
});
