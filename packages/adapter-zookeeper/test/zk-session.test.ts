import { budget } from '@dlm/core';
import { startZooKeeper, type ZooKeeperService, zookeeperAvailable } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CreateMode, openSession, type ZkSession } from '../src/zk-session.js';

describe.skipIf(!zookeeperAvailable())("the adapter's ZooKeeper session", () => {
  let zk: ZooKeeperService;
  let session: ZkSession;
  beforeAll(async () => {
    zk = await startZooKeeper();
    session = openSession(zk.connectString, { sessionTimeoutMs: 4_000 });
  });
  afterAll(async () => {
    await session?.close();
    await zk?.stop();
  });

  it('wakes every one of many watchers of one node once, with no MaxListenersExceededWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    try {
      const limit = () => budget('test', 5_000);
      const path = '/fan-out';
      await session.mkdirp(limit(), path);
      const calls = { data: 0, children: 0, exists: 0 };
      const woken = (kind: keyof typeof calls) => () => {
        calls[kind] += 1;
      };
      // Twenty waiters of each kind, as a queue of shared waiters behind one holder sets them.
      for (let i = 0; i < 20; i++) {
        await session.getData(limit(), path, woken('data'));
        await session.getChildren(limit(), path, woken('children'));
        await session.exists(limit(), `${path}/child`, woken('exists'));
      }
      await session.setData(limit(), path, Buffer.from('changed'));
      await session.multi(limit(), (ops) =>
        ops.create(`${path}/child`, Buffer.alloc(0), CreateMode.PERSISTENT),
      );
      const deadline = Date.now() + 5_000;
      while (calls.data + calls.children + calls.exists < 60 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // Another change: ZooKeeper's watches fire once, and so does each of ours.
      await session.setData(limit(), path, Buffer.from('again'));
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(calls).toEqual({ data: 20, children: 20, exists: 20 });
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
