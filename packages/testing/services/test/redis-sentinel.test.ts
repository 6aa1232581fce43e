import { describe, expect, it } from 'vitest';
import { breakable, pingRedis, startRedisSentinel } from '../src/index.js';
import { redisQuery } from '../src/redis-sentinel.js';
import { serviceFor } from './support.js';

const enabled = breakable('redis-sentinel');

describe.skipIf(!enabled)('startRedisSentinel', () => {
  const deployment = serviceFor(enabled, () => startRedisSentinel());

  it('starts a master with two replicas that three sentinels agree on', async () => {
    const sentinel = await deployment();
    expect(sentinel.sentinels).toHaveLength(3);
    expect(sentinel.servers).toHaveLength(3);
    const master = await sentinel.master();
    expect(master.port).toBe(sentinel.servers[0]!.port);
    const info = await redisQuery(master, 'INFO replication');
    expect(info).toContain('role:master');
    expect(info).toContain('connected_slaves:2');
  });

  it('fails over to a replica after kill -9 of the master', async () => {
    const sentinel = await deployment();
    const old = await sentinel.master();
    const killed = await sentinel.killMaster();
    expect(killed.port).toBe(old.port);
    expect(await pingRedis(old.host, old.port, 300)).toBe(false);
    const promoted = await sentinel.failedOver(old);
    expect(promoted.port).not.toBe(old.port);
    expect(sentinel.servers.map((server) => server.port)).toContain(promoted.port);
    expect(await redisQuery(promoted, 'INFO replication')).toContain('role:master');
  }, 40_000);
});
