import {
  type ContainerProcess,
  removeAll,
  serviceImage,
  startContainer,
} from './container-process.js';
import { allStarted } from './process.js';
import {
  planEnsemble,
  type ZooKeeperMember,
  type ZooKeeperService,
  zookeeperMember,
  zookeeperServes,
  zookeeperService,
} from './zookeeper.js';

/**
 * ZooKeeper members in containers (the `docker` provider of `startZooKeeper` and
 * `startZooKeeperEnsemble`): one container per member on free loopback ports of the host
 * network. Each gets its zoo.cfg at /conf/zoo.cfg and its myid in /data before it starts, and
 * runs `zkServer.sh start-foreground /conf/zoo.cfg`: the official image's entrypoint hands
 * that to its zookeeper user (after chowning /data), the locally built
 * dlm-test/zookeeper:local answers the same command with a small zkServer.sh of its own.
 */

/** `size` members (1 = standalone), resolved once each serves (standalone, leader or follower). */
export async function startZooKeeperContainers(size: number): Promise<ZooKeeperService> {
  // Inside the member's own container.
  const { specs, config } = await planEnsemble(size, () => '/data');
  const members = await allStarted(
    specs.map(async (spec): Promise<ZooKeeperMember & { process: ContainerProcess }> => {
      const managed = await startContainer({
        name: `zookeeper ${spec.id} (docker)`,
        image: serviceImage('zookeeper'),
        command: ['zkServer.sh', 'start-foreground', '/conf/zoo.cfg'],
        environment: { ZK_SERVER_HEAP: '256', ZOO_MY_ID: String(spec.id) },
        files: [
          { target: '/conf/zoo.cfg', content: config(spec) },
          ...(size > 1 ? [{ target: '/data/myid', content: `${spec.id}\n` }] : []),
        ],
        readyTimeoutMs: 90_000,
        ready: () => zookeeperServes(spec.clientPort, size),
      });
      return zookeeperMember(spec, managed);
    }),
    (member) => member.process.remove(),
  );
  const base = zookeeperService(
    members.map((member) => member.connectString).join(','),
    members,
    false,
  );
  return { ...base, stop: () => removeAll(members) };
}
