import { describe, expect, it } from 'vitest';
import { runDlm, useCliServer } from './run-dlm.js';

const cli = useCliServer();
const { env } = cli;

describe('dlm lock --max-hold', () => {
  it('stops CMD at the cap however long it runs (exit 123, lost: maxHold), and the lock is free after', async () => {
    const name = 'cli-max-hold/capped';
    const startedAt = performance.now();
    const done = await runDlm(
      [
        'lock',
        name,
        '--ttl',
        '300ms',
        '--max-hold',
        '1500ms',
        '--grace',
        '1s',
        '--',
        'sleep',
        '20',
      ],
      env,
    );
    const tookMs = performance.now() - startedAt;
    expect(done.code).toBe(123);
    expect(done.stderr).toContain(`lost lock ${name} (maxHold)`);
    // Renewed past its TTL, stopped at the cap (plus the start-up and the command's stop).
    expect(tookMs).toBeGreaterThan(1_400);
    expect(tookMs).toBeLessThan(8_000);
    const next = await cli.client.acquire(name, { ttlMs: 5_000, waitMs: 2_000 });
    await next.release();
  });

  it('a bad --max-hold is a usage error in its own terms', async () => {
    const below = await runDlm(
      ['lock', 'cli-max-hold/below', '--ttl', '5s', '--max-hold', '2s', '--', 'true'],
      env,
    );
    expect(below.code).toBe(2);
    expect(below.stderr).toContain('--max-hold must be at least --ttl (5s), got 2s');
    const over = await runDlm(
      ['lock', 'cli-max-hold/over', '--max-hold', '200h', '--', 'true'],
      env,
    );
    expect(over.code).toBe(2);
    expect(over.stderr).toContain('--max-hold must be at most');
    const two = await runDlm(['lock', 'a', 'b', '--max-hold', '1m', '--', 'true'], env);
    expect(two.code).toBe(2);
    expect(two.stderr).toContain('--max-hold takes one NAME');
  });
});
