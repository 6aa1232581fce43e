import { breakable, startEtcdCluster } from '@dlm/test-services';
import { balancedCluster, behindHaproxy, clusterFlags } from './lb-scenarios.js';

// Members are killed and restarted: only with etcd processes the tests start themselves.
behindHaproxy('etcd', breakable('etcd'), async () => {
  const etcd = await startEtcdCluster(3);
  return balancedCluster({
    addresses: etcd.endpoints.map((endpoint) => new URL(endpoint).host),
    serverArgsFor: (addresses) =>
      clusterFlags(
        'etcd',
        '--etcd-endpoints',
        addresses.map((address) => `http://${address}`),
      ),
    members: etcd.members.map(({ name, process }) => ({ name, process })),
    leaderName: async () => (await etcd.waitForLeader()).name,
    stop: () => etcd.stop(),
  });
});
