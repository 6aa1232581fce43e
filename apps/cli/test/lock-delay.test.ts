import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { fixtureCommand, runDlm, sleep, startDlm, useCliServer, waitForFile } from './run-dlm.js';

const cli = useCliServer();
const { env } = cli;

describe('dlm lock --lock-delay', () => {
  it('exits 124 saying the lock is in its lock-delay when the last lease expired', async () => {
    const name = 'cli-delay/expired';
    await cli.client.acquire(name, { ttlMs: 300, lockDelayMs: 5_000 });
    await sleep(600);
    const done = await runDlm(['lock', name, '--wait', '0', '--', 'true'], env);
    expect(done.code).toBe(124);
    expect(done.stderr).toContain(`lock ${name} is in its lock-delay`);
  });

  it('a bad --lock-delay is a usage error in its own terms', async () => {
    const over = await runDlm(['lock', 'cli-delay/over', '--lock-delay', '2m', '--', 'true'], env);
    expect(over.code).toBe(2);
    expect(over.stderr).toContain('--lock-delay must be between');
    const two = await runDlm(['lock', 'a', 'b', '--lock-delay', '1s', '--', 'true'], env);
    expect(two.code).toBe(2);
    expect(two.stderr).toContain('--lock-delay takes one NAME');
  });

  // The pause scenario, without fencing: a holder stopped past its lease, with a lock-delay longer
  // than the pause, resumes and learns it lost the lock before anyone else was granted it.
  it('a holder SIGSTOPped past its lease resumes, finds the lock no longer its own and stops CMD, before the next holder is granted', async () => {
    const name = 'cli-delay/paused';
    const dir = tempDir('cli-delay');
    const run = startDlm(
      [
        'lock',
        name,
        '--ttl',
        '1s',
        '--lock-delay',
        '6s',
        '--',
        ...fixtureCommand(dir, 'wait-file', 0),
      ],
      env,
    );
    const started = JSON.parse(await waitForFile(join(dir, 'env.json')));
    const token = BigInt(started.token);
    run.child.kill('SIGSTOP');
    const stoppedAt = performance.now();
    // The next holder waits, from the moment the lease is surely over.
    await sleep(1_500);
    const info = await cli.client.get(name);
    expect(info.held).toBe(false);
    expect(!info.held && info.lockDelayRemainingMs).toBeGreaterThan(3_000);
    let grantedAt = Number.POSITIVE_INFINITY;
    const next = cli.client.acquire(name, { ttlMs: 5_000, waitMs: 15_000 }).then((lease) => {
      grantedAt = performance.now();
      return lease;
    });
    await sleep(1_000);
    run.child.kill('SIGCONT');
    const finished = await run.finished;
    const resumedDoneAt = performance.now();
    // It learnt the lease was lost (exit 123) and stopped CMD, before the next one was granted.
    expect(finished.code).toBe(123);
    expect(existsSync(join(dir, 'go'))).toBe(false);
    expect(resumedDoneAt).toBeLessThan(grantedAt);
    const lease = await next;
    expect(lease.token).toBeGreaterThan(token);
    expect(grantedAt - stoppedAt).toBeGreaterThanOrEqual(6_000);
    await lease.release();
    writeFileSync(join(dir, 'go'), '');
  });
});
