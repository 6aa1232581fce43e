import { describe, expect, it } from 'vitest';
import {
  fourLetterWord,
  startZooKeeper,
  startZooKeeperEnsemble,
  zookeeperAvailable,
  zookeeperManaged,
  zookeeperMode,
} from '../src/index.js';
import { serviceFor } from './support.js';

const run = zookeeperAvailable();

describe.skipIf(!run)('zookeeper test service', () => {
  describe('standalone', () => {
    const started = serviceFor(run, () => startZooKeeper());

    it('answers ruok and runs standalone', async () => {
      const zk = await started();
      if (zk.external) return;
      const member = zk.members[0]!;
      expect(zk.connectString).toBe(`127.0.0.1:${member.clientPort}`);
      expect(await fourLetterWord('127.0.0.1', member.clientPort, 'ruok')).toBe('imok');
      expect(await zookeeperMode(member.clientPort)).toBe('standalone');
      expect(await zk.leader()).toBe(member);
    });
  });

  describe.skipIf(!zookeeperManaged())('ensemble of three', () => {
    const started = serviceFor(run && zookeeperManaged(), () => startZooKeeperEnsemble(3));

    it('has one leader, elects another after kill -9, and takes the member back', async () => {
      const zk = await started();
      const modes = await Promise.all(zk.members.map((member) => zookeeperMode(member.clientPort)));
      expect(modes.filter((mode) => mode === 'leader')).toHaveLength(1);
      expect(modes.filter((mode) => mode === 'follower')).toHaveLength(2);

      const leader = (await zk.leader())!;
      await leader.process.kill();
      const next = await zk.waitForLeader();
      expect(next).not.toBe(leader);

      await leader.process.start();
      expect(await zookeeperMode(leader.clientPort)).toBe('follower');
    });
  });
});
