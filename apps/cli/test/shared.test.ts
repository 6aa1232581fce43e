import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { fixtureCommand, runDlm, sleep, startDlm, useCliServer, waitForFile } from './run-dlm.js';

const cli = useCliServer();
const { env } = cli;

/** `dlm lock NAME FLAGS -- <fixture> DIR wait-file`: holds until DIR/go exists. */
function holder(name: string, flags: string[]) {
  const dir = tempDir('cli-shared');
  const run = startDlm(['lock', name, ...flags, '--', ...fixtureCommand(dir, 'wait-file', 0)], env);
  return {
    dir,
    run,
    running: () => existsSync(join(dir, 'env.json')),
    started: async () => JSON.parse(await waitForFile(join(dir, 'env.json'))),
    stop: () => writeFileSync(join(dir, 'go'), ''),
  };
}

describe('dlm lock --shared --limit N', () => {
  it('two dlm locks hold a limit-2 semaphore at once; a third waits until one exits', async () => {
    const name = 'cli-shared/semaphore';
    const flags = ['--shared', '--limit', '2', '--ttl', '5s', '--wait', '10s'];
    const first = holder(name, flags);
    const second = holder(name, flags);
    const [a, b] = await Promise.all([first.started(), second.started()]);
    expect(a.token).not.toBe(b.token);
    const held = await runDlm(['get', name, '--json'], env);
    const info = JSON.parse(held.stdout);
    expect(info).toMatchObject({ held: true, mode: 'shared', limit: 2 });
    expect(info.holders.map((h: { token: string }) => h.token).sort()).toEqual(
      [a.token, b.token].sort(),
    );
    const text = await runDlm(['get', name], env);
    expect(text.stdout).toContain(`${name}: held shared by 2 holders (limit 2)`);
    expect(text.stdout).toContain(`${a.owner}, token ${a.token}`);

    const listed = await runDlm(['ls', '--prefix', 'cli-shared/semaphore'], env);
    expect(listed.stdout).toMatch(/\(shared 2\/2\)/);

    const third = holder(name, flags);
    await sleep(500);
    expect(third.running(), 'a third permit while two are held').toBe(false);
    first.stop();
    expect((await first.run.finished).code).toBe(0);
    const c = await third.started();
    expect(BigInt(c.token)).toBeGreaterThan(
      BigInt(b.token) > BigInt(a.token) ? BigInt(b.token) : BigInt(a.token),
    );
    second.stop();
    third.stop();
    expect((await second.run.finished).code).toBe(0);
    expect((await third.run.finished).code).toBe(0);
    expect((await runDlm(['get', name], env)).stdout).toBe(`${name}: free\n`);
  });

  it('--shared alone is a read lock beside other readers; an exclusive dlm lock waits for them', async () => {
    const name = 'cli-shared/read';
    const readers = [holder(name, ['--shared']), holder(name, ['--shared'])];
    await Promise.all(readers.map((reader) => reader.started()));
    const writer = holder(name, ['--wait', '10s']);
    await sleep(500);
    expect(writer.running()).toBe(false);
    for (const reader of readers) reader.stop();
    await writer.started();
    writer.stop();
    expect((await writer.run.finished).code).toBe(0);
  });

  it('exits 124 saying there is no room when the semaphore is full and --wait runs out', async () => {
    const name = 'cli-shared/full';
    const permit = await cli.client.semaphore(name, 1).acquire({ ttlMs: 10_000 });
    const done = await runDlm(['lock', name, '--limit', '1', '--wait', '0', '--', 'true'], env);
    expect(done.code).toBe(124);
    expect(done.stderr).toContain(`lock ${name} has no room for another shared holder (limit 1)`);
    await permit.release();
  });

  it('another --limit than the holders is a usage error naming both; a bad --limit never connects', async () => {
    const name = 'cli-shared/mismatch';
    const permit = await cli.client.semaphore(name, 2).acquire({ ttlMs: 10_000 });
    const done = await runDlm(['lock', name, '--limit', '3', '--', 'true'], env);
    expect(done.code).toBe(2);
    expect(done.stderr).toContain('--limit 3');
    expect(done.stderr).toContain('--limit 2');
    await permit.release();
    for (const bad of ['0', '-1', '1.5', 'two']) {
      const refused = await runDlm(['lock', name, '--limit', bad, '--', 'true'], {
        DLM_URL: 'ws://127.0.0.1:1',
      });
      expect(refused.code, bad).toBe(2);
      expect(refused.stderr, bad).toContain('--limit');
    }
    const tooMany = await runDlm(['lock', name, '--limit', '10001', '--', 'true'], env);
    expect(tooMany.code).toBe(2);
    expect(tooMany.stderr).toContain('--limit');
  });

  it('dlm watch prints each shared holder joining and leaving, with the count', async () => {
    const name = 'cli-shared/watch';
    const watch = startDlm(['watch', name], env);
    await watch.waitForOutput(/cli-shared\/watch {2}free/);
    const pool = cli.client.semaphore(name, 3);
    const first = await pool.acquire({ ttlMs: 10_000, owner: 'w-1' });
    await watch.waitForOutput(/held shared by w-1 \(token \d+\), 1 holder\n/);
    const second = await pool.acquire({ ttlMs: 10_000, owner: 'w-2' });
    await watch.waitForOutput(/held shared by w-2 \(token \d+\), 2 holders/);
    await first.release();
    await watch.waitForOutput(/a holder left, 1 holder\n/);
    await second.release();
    await watch.waitForOutput(/free\n.*\n.*\n.*free\n/s);
    watch.child.kill('SIGINT');
    expect((await watch.finished).code).toBe(0);
  });
});
