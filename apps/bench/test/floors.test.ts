import { etcdAvailable, startEtcd } from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { measureFloor } from '../src/floors.js';

const WINDOW = { clients: 4, durationMs: 400, warmupMs: 100 };

describe("a backend's floor: its own plain write at the workloads' concurrency", () => {
  it.skipIf(!etcdAvailable())(
    'etcd: every writer puts its own key, timed in the window',
    async () => {
      const etcd = await startEtcd();
      const client = new Etcd3({ hosts: etcd.endpoints });
      try {
        const floor = await measureFloor('etcd', { etcd }, { ...WINDOW, runId: 'f1' });
        expect(floor.errors).toBe(0);
        expect(floor.writes).toBeGreaterThan(0);
        expect(floor.writesPerSecond).toBeCloseTo(floor.writes / 0.4);
        expect(floor.latency.p50).toBeGreaterThan(0);
        expect(floor.latency.p99).toBeGreaterThanOrEqual(floor.latency.p50);
        // The puts reached etcd: one key per writer.
        expect(await client.getAll().prefix('bench/floor/f1/').count()).toBe(WINDOW.clients);
      } finally {
        client.close();
        await etcd.stop();
      }
    },
  );

  it('disk: appends with fdatasync, and a backend without its service is a clear error', async () => {
    const floor = await measureFloor('disk', {}, { ...WINDOW, runId: 'f2' });
    expect(floor.errors).toBe(0);
    expect(floor.writes).toBeGreaterThan(0);
    await expect(measureFloor('zookeeper', {}, { ...WINDOW, runId: 'f3' })).rejects.toThrow(
      'the ZooKeeper floor needs ZooKeeper',
    );
  });
});
