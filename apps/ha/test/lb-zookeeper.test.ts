import { breakable, startZooKeeperEnsemble } from '@dlm/test-services';
import { balancedCluster, behindHaproxy, clusterFlags } from './lb-scenarios.js';

// Members are killed and restarted: only with ZooKeeper processes the tests start themselves.
behindHaproxy('ZooKeeper', breakable('zookeeper'), async () => {
  const zk = await startZooKeeperEnsemble(3);
  return balancedCluster({
    addresses: zk.connectString.split(','),
    serverArgsFor: (addresses) => clusterFlags('zookeeper', '--zk-connect', addresses),
    members: zk.members.map((member) => ({ name: `zk${member.id}`, process: member.process })),
    leaderName: async () => `zk${(await zk.waitForLeader()).id}`,
    stop: () => zk.stop(),
  });
});
