import { startZooKeeperEnsemble, zookeeperAvailable, zookeeperManaged } from '@dlm/test-services';
import { describe } from 'vitest';
import { serversFromEnv } from './dlm-server.js';
import { balancedCluster, loadBalancerScenarios } from './lb-scenarios.js';
import { haproxyAvailable } from './load-balancer.js';

// Members are killed and restarted: only with ZooKeeper processes the tests start themselves.
const run = zookeeperAvailable() && zookeeperManaged() && haproxyAvailable();

const zkArgs = (addresses: string[]) => [
  '--backend',
  'zookeeper',
  '--zk-connect',
  addresses.join(','),
];

describe.skipIf(!run)('ZooKeeper behind HAProxy', () => {
  loadBalancerScenarios(
    'ZooKeeper',
    async () => {
      const zk = await startZooKeeperEnsemble(3);
      return balancedCluster({
        addresses: zk.connectString.split(','),
        serverArgsFor: zkArgs,
        members: zk.members.map((member) => ({ name: `zk${member.id}`, process: member.process })),
        leaderName: async () => `zk${(await zk.waitForLeader()).id}`,
        stop: () => zk.stop(),
      });
    },
    serversFromEnv(),
  );
});
