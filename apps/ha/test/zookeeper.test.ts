import { breakable, startZooKeeperEnsemble } from '@dlm/test-services';
import { describe } from 'vitest';
import { type Cluster, haScenarios } from './scenarios.js';

// Members are killed and restarted: only with ZooKeeper processes the tests start themselves.
const run = breakable('zookeeper');

describe.skipIf(!run)('zookeeper', () => {
  haScenarios('ZooKeeper', async (): Promise<Cluster> => {
    // tickTime=200: sessions last at most 4 s, so a dead dlm server's waiters leave the queue
    // within that.
    const zk = await startZooKeeperEnsemble(3);
    const members = zk.members.map((member) => ({
      name: `zk${member.id}`,
      process: member.process,
    }));
    return {
      serverArgs: ['--backend', 'zookeeper', '--zk-connect', zk.connectString],
      members,
      async waitForLeader() {
        const leader = await zk.waitForLeader();
        return members.find((member) => member.name === `zk${leader.id}`)!;
      },
      stop: () => zk.stop(),
    };
  });
});
