import { etcdAvailable, etcdManaged, startEtcdCluster } from '@dlm/test-services';
import { describe } from 'vitest';
import { serversFromEnv } from './dlm-server.js';
import { balancedCluster, loadBalancerScenarios } from './lb-scenarios.js';
import { haproxyAvailable } from './load-balancer.js';

// Members are killed and restarted: only with etcd processes the tests start themselves.
const run = etcdAvailable() && etcdManaged() && haproxyAvailable();

const etcdArgs = (endpoints: string[]) => [
  '--backend',
  'etcd',
  '--etcd-endpoints',
  endpoints.join(','),
];

describe.skipIf(!run)('etcd behind HAProxy', () => {
  loadBalancerScenarios(
    'etcd',
    async () => {
      const etcd = await startEtcdCluster(3);
      return balancedCluster({
        addresses: etcd.endpoints.map((endpoint) => new URL(endpoint).host),
        serverArgsFor: (addresses) => etcdArgs(addresses.map((address) => `http://${address}`)),
        members: etcd.members.map(({ name, process }) => ({ name, process })),
        leaderName: async () => (await etcd.waitForLeader()).name,
        stop: () => etcd.stop(),
      });
    },
    serversFromEnv(),
  );
});
