import { breakable, startEtcdCluster } from '@dlm/test-services';
import { describe } from 'vitest';
import { type Cluster, haScenarios } from './scenarios.js';

// Members are killed and restarted: only with etcd processes the tests start themselves.
const run = breakable('etcd');

describe.skipIf(!run)('etcd', () => {
  haScenarios('etcd', async (): Promise<Cluster> => {
    // etcd's default timings (100 ms heartbeat, 1 s election timeout), as in production;
    // dlm-server's default etcd lease minimum (2 s) matches them.
    const etcd = await startEtcdCluster(3);
    const members = etcd.members.map((member) => ({ name: member.name, process: member.process }));
    return {
      serverArgs: ['--backend', 'etcd', '--etcd-endpoints', etcd.endpoints.join(',')],
      members,
      async waitForLeader() {
        const leader = await etcd.waitForLeader();
        return members.find((member) => member.name === leader.name)!;
      },
      stop: () => etcd.stop(),
    };
  });
});
