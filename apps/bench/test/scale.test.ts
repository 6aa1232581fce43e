import { createClient } from '@dlm/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServerProcess, startServerProcess } from '../src/server-process.js';
import { runScale } from '../src/workloads/scale.js';
import { lookUpHeld, runRecovery } from '../src/workloads/scale-recovery.js';

// The workload's client processes run `dist/scale-worker.js`: `pnpm test` builds first.

/** Short settles and a bound on each phase: a test-sized run. */
const QUICK = { settleMs: 200, phaseTimeoutMs: 30_000 };

describe('scale workload', () => {
  it('holds the locks from sessions spread over client processes, without a failure', async () => {
    const result = await runScale('test:scale', {
      sessions: 40,
      locks: 400,
      probeAtLocks: 100,
      probeCount: 20,
      sessionsPerWorker: 20,
      recoveryLocks: 0,
      ...QUICK,
    });
    expect(result.errors, result.notes.join('; ')).toBe(0);
    expect(result).toMatchObject({ sessions: 40, locks: 400, workers: 2 });
    expect(result.recoveryMs).toBeUndefined();
    expect(result.rssMiB.full).toBeGreaterThan(result.rssMiB.idle);
  }, 60_000);

  it('recovery: after kill -9 and a restart on the data dir, held locks keep their tokens', async () => {
    const result = await runRecovery('test:recovery', {
      locks: 300,
      sessions: 20,
      sessionsPerWorker: 10,
      ...QUICK,
    });
    expect(result.errors, result.notes.join('; ')).toBe(0);
    // One held name per client process, each looked up after the restart.
    expect(result.checked).toBe(2);
    expect(result.journalMiB).toBeGreaterThan(0);
    expect(result.recoveryMs).toBeGreaterThanOrEqual(result.readyMs);
  }, 60_000);

  describe('the lookup after a restart', () => {
    let server: ServerProcess;
    beforeAll(async () => {
      server = await startServerProcess({ backendArgs: ['--backend', 'embedded', '--memory'] });
    }, 30_000);
    afterAll(() => server?.stop());

    it('finds a held lock under its token, and reports another token or a free name', async () => {
      const client = createClient({ url: server.url, pingIntervalMs: 0 });
      const lease = await client.acquire('test:lookup:held', { ttlMs: 60_000 });
      try {
        const held = { name: lease.name, token: String(lease.token) };
        const t0 = performance.now();
        const found = await lookUpHeld(server.url, [held], t0);
        expect(found.missing).toEqual([]);
        expect(found.recoveryMs).toBeGreaterThan(0);
        const wrong = await lookUpHeld(
          server.url,
          [
            { name: lease.name, token: String(lease.token + 1n) },
            { name: 'test:lookup:free', token: '1' },
          ],
          t0,
        );
        expect(wrong.missing).toHaveLength(2);
      } finally {
        await client.close();
      }
    });
  });
});
