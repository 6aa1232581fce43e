import { startZooKeeperEnsemble, zookeeperAvailable, zookeeperManaged } from '@dlm/test-services';
import { describe } from 'vitest';
import { serversFromEnv } from './dlm-server.js';
import { type BalancedCluster, loadBalancerScenarios } from './lb-scenarios.js';
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
    async (): Promise<BalancedCluster> => {
      const zk = await startZooKeeperEnsemble(3);
      const members = zk.members.map((member) => ({
        name: `zk${member.id}`,
        process: member.process,
      }));
      const addresses = zk.connectString.split(',');
      return {
        serverArgs: zkArgs(addresses),
        addresses,
        serverArgsFor: zkArgs,
        members,
        async waitForLeader() {
          const leader = await zk.waitForLeader();
          return members.find((member) => member.name === `zk${leader.id}`)!;
        },
        stop: () => zk.stop(),
      };
    },
    serversFromEnv(),
  );
});
