import { clusterTarget, killAndStart, runConformance } from '@dlm/conformance';
import { startZooKeeperEnsemble, zookeeperAvailable, zookeeperManaged } from '@dlm/test-services';
import { describe } from 'vitest';
import { zookeeperBackend } from '../src/index.js';
import { lockPaths } from '../src/zk-paths.js';
import { useZooKeeper, waiterNodes } from './support.js';

const run = zookeeperAvailable();
/** zookeeperBackend's default root: the fair-queue probe lists its waiter nodes. */
const paths = lockPaths('/dlm');

describe.skipIf(!run)('zookeeper adapter', () => {
  const { zk, raw } = useZooKeeper();

  runConformance('zookeeper', {
    backend: () => zookeeperBackend({ connect: zk().connectString, sessionTimeoutMs: 4_000 }),
    fairQueue: {
      // The waiter nodes of `name`'s queue, in queue order (none once the lock node is gone).
      entries: (name) => waiterNodes(raw(), paths.parent(name)),
    },
    ...(zookeeperManaged()
      ? {
          restart: () => killAndStart(zk().members[0]!.process),
          cluster: async () => {
            const commandTimeoutMs = 2_000;
            const ensemble = await startZooKeeperEnsemble(3);
            // 4 s is the longest session tickTime=200 allows: long enough to ride out an election.
            const backend = zookeeperBackend({
              connect: ensemble.connectString,
              sessionTimeoutMs: 4_000,
              commandTimeoutMs,
            });
            return clusterTarget(ensemble, backend, {
              commandTimeoutMs,
              heldTtlMs: 30_000,
              resumeAfterMajorityMs: 20_000,
            });
          },
        }
      : {}),
  });
});
