import { etcdAvailable, etcdManaged, startEtcdCluster } from '@dlm/test-services';
import { describe } from 'vitest';
import { serversFromEnv } from './dlm-server.js';
import { type BalancedCluster, loadBalancerScenarios } from './lb-scenarios.js';
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
    async (): Promise<BalancedCluster> => {
      const etcd = await startEtcdCluster(3);
      const members = etcd.members.map((member) => ({
        name: member.name,
        process: member.process,
      }));
      return {
        serverArgs: etcdArgs(etcd.endpoints),
        addresses: etcd.endpoints.map((endpoint) => new URL(endpoint).host),
        serverArgsFor: (addresses) => etcdArgs(addresses.map((address) => `http://${address}`)),
        members,
        async waitForLeader() {
          const leader = await etcd.waitForLeader();
          return members.find((member) => member.name === leader.name)!;
        },
        stop: () => etcd.stop(),
      };
    },
    serversFromEnv(),
  );
});
