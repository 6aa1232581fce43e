import { describe, expect, it } from 'vitest';
import { redisCli, redisClusterAvailable, startRedisCluster } from '../src/index.js';

import { serviceFor } from './support.js';

const enabled = redisClusterAvailable();

describe.skipIf(!enabled)('startRedisCluster', () => {
  const cluster = serviceFor(enabled, () => startRedisCluster());

  it('starts 3 masters and 3 replicas serving every slot', async () => {
    const topology = await (await cluster()).topology();
    expect(topology.filter((node) => node.role === 'master')).toHaveLength(3);
    expect(topology.filter((node) => node.role === 'replica')).toHaveLength(3);
    const slots = topology.flatMap((node) => node.slots).reduce((n, [a, b]) => n + b - a + 1, 0);
    expect(slots).toBe(16_384);
    for (const port of (await cluster()).nodes.map((node) => node.port)) {
      expect(port + 10_000).toBeLessThanOrEqual(65_535);
    }
  });

  it('migrateSlot moves a slot and its keys to another master', async () => {
    const service = await cluster();
    const slot = await service.slotOf('{moving}:a');
    const from = await service.masterOf(slot);
    await redisCli(from.port, ['set', '{moving}:a', 'kept']);
    const masters = (await service.topology()).filter((node) => node.role === 'master');
    const to = service.nodes.find(
      (node) => node !== from && masters.some((master) => master.port === node.port),
    )!;
    await service.migrateSlot(slot, to);
    expect((await service.masterOf(slot)).port).toBe(to.port);
    expect((await redisCli(to.port, ['get', '{moving}:a'])).trim()).toBe('kept');
  });

  it('killMaster kills the slot master and a replica takes over its slots', async () => {
    const service = await cluster();
    const slot = await service.slotOf('{failover}');
    const killed = await service.killMaster(slot);
    expect(killed.process.running).toBe(false);
    await service.waitUntilOk(30_000, false);
    const promoted = await service.masterOf(slot);
    expect(promoted).not.toBe(killed);
    expect(promoted.process.running).toBe(true);
  });
});
