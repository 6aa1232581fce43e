import { describe, expect, it } from 'vitest';
import { etcdAvailable, etcdManaged, startEtcd, startEtcdCluster } from '../src/index.js';
import { serviceFor } from './support.js';

const run = etcdAvailable();

async function put(endpoint: string, key: string, value: string): Promise<void> {
  // The gRPC gateway takes base64 keys and values.
  const response = await fetch(`${endpoint}/v3/kv/put`, {
    method: 'POST',
    body: JSON.stringify({
      key: Buffer.from(key).toString('base64'),
      value: Buffer.from(value).toString('base64'),
    }),
  });
  expect(response.ok).toBe(true);
}

async function get(endpoint: string, key: string): Promise<string | undefined> {
  const response = await fetch(`${endpoint}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
  });
  const body = (await response.json()) as { kvs?: { value: string }[] };
  const value = body.kvs?.[0]?.value;
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString();
}

describe.skipIf(!run)('etcd test service', () => {
  describe('single member', () => {
    const started = serviceFor(run, () => startEtcd());

    it('serves reads and writes on its endpoint and leads itself', async () => {
      const etcd = await started();
      expect(etcd.endpoints).toHaveLength(1);
      await put(etcd.endpoints[0]!, 'k', 'v');
      expect(await get(etcd.endpoints[0]!, 'k')).toBe('v');
      if (!etcd.external) expect(await etcd.leader()).toBe(etcd.members[0]);
    });
  });

  describe.skipIf(!etcdManaged())('three members', () => {
    const started = serviceFor(run && etcdManaged(), () => startEtcdCluster(3));

    it('elects a new leader after kill -9 of the leader and takes the member back with its data', async () => {
      const etcd = await started();
      expect(etcd.members).toHaveLength(3);
      const leader = await etcd.waitForLeader();
      const others = etcd.members.filter((member) => member !== leader);
      await put(others[0]!.clientUrl, 'before', '1');

      await leader.process.kill();
      expect(leader.process.running).toBe(false);
      const next = await etcd.waitForLeader();
      expect(next).not.toBe(leader);
      await put(next.clientUrl, 'during', '2');

      await leader.process.start();
      // The restarted member kept its data dir: it has the old write and catches up on the new.
      expect(await get(leader.clientUrl, 'before')).toBe('1');
      expect(await get(leader.clientUrl, 'during')).toBe('2');
    });
  });
});
