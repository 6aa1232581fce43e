import { breakable, etcdAvailable, zookeeperAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { measureResidue, type ResidueOptions } from '../src/residue.js';

/**
 * What each backend keeps after many unique names were locked and released must come back to
 * a constant within the last lease's TTL plus the adapter's stated margin (the 100 000-name
 * figures in the report come from `node apps/bench/dist/residue.js`, this is the same
 * measurement with fewer names and short margins).
 */
const OPTIONS: ResidueOptions = {
  names: 400,
  ttlMs: 500,
  concurrency: 16,
  settleMs: 10_000,
  pollMs: 100,
  fenceRetentionMs: 500,
  sweepIntervalMs: 500,
};
/** Polling, Redis's sampled expiry, a loaded machine. */
const SLACK_MS = 2_000;

describe('what stays in each backend after unique names were locked and released', () => {
  it('embedded (memory): nothing held, straight away', async () => {
    const result = await measureResidue('embedded-memory', OPTIONS);
    expect(result.afterRelease.heldListed).toBe(0);
    expect(result.returnedAfterMs).toBe(0);
  });

  it('embedded (data dir): the journal stays within its compaction bound', async () => {
    const compactAfterBytes = 16 * 1024;
    const result = await measureResidue('embedded-data-dir', {
      ...OPTIONS,
      names: 2_000,
      compactAfterBytes,
    });
    expect(result.afterRelease.heldListed).toBe(0);
    // Uncompacted, 2 000 grants and releases take some 250 KiB; compaction keeps it below the
    // threshold plus the snapshot of what is held (nothing) and the records since.
    expect(result.settled.dataDirBytes).toBeLessThan(2 * compactAfterBytes);
  });

  it.skipIf(!breakable('redis'))(
    'redis: no key remains once the last lease and the fence retention have passed',
    async () => {
      const result = await measureResidue('redis', OPTIONS);
      expect(result.afterRelease.keys).toBeGreaterThan(0); // the fence keys, within retention
      expect(result.returnedAfterMs).toBeDefined();
      expect(result.returnedAfterMs!).toBeLessThan(
        OPTIONS.ttlMs + OPTIONS.fenceRetentionMs + SLACK_MS,
      );
      expect(result.settled.keys).toBe(0);
    },
  );

  it.skipIf(!breakable('redis'))(
    'redlock: no key remains on any node once the last lease and the fence retention have passed',
    async () => {
      const result = await measureResidue('redlock', OPTIONS);
      expect(result.returnedAfterMs).toBeDefined();
      expect(result.returnedAfterMs!).toBeLessThan(
        OPTIONS.ttlMs + OPTIONS.fenceRetentionMs + SLACK_MS,
      );
      expect(Object.values(result.settled)).toEqual([0, 0, 0]);
    },
  );

  it.skipIf(!etcdAvailable())(
    'etcd: no per-name key after the release, and a compaction takes the revisions back',
    async () => {
      const result = await measureResidue('etcd', OPTIONS);
      expect(result.afterRelease.nameKeys).toBe(0);
      expect(result.afterRelease.otherKeys).toBeLessThanOrEqual(1);
      expect(result.afterRelease.revision).toBeGreaterThan(result.baseline.revision!);
      expect(result.settled.dbSizeKiB).toBeLessThan(result.afterRelease.dbSizeKiB!);
    },
  );

  it.skipIf(!zookeeperAvailable())(
    'zookeeper: the sweeper removes every name node within 2.5 sweep intervals (plus the sweep)',
    async () => {
      const result = await measureResidue('zookeeper', OPTIONS);
      expect(result.afterRelease.nameNodes).toBeGreaterThan(0);
      expect(result.returnedAfterMs).toBeDefined();
      expect(result.returnedAfterMs!).toBeLessThan(2.5 * OPTIONS.sweepIntervalMs + SLACK_MS);
      expect(result.settled.nameNodes).toBe(0);
    },
    30_000,
  );
});
