import { type ContainerProcess, startContainer } from './container-process.js';
import { freePort } from './process.js';
import {
  fourLetterWord,
  type ZooKeeperMember,
  type ZooKeeperService,
  zookeeperMode,
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

export const ZOOKEEPER_IMAGE_ENV = 'DLM_TEST_ZK_IMAGE';

export function zookeeperImage(): string {
  return process.env[ZOOKEEPER_IMAGE_ENV]?.trim() || 'zookeeper:3.8';
}

/** `size` members (1 = standalone), resolved once each serves (standalone, leader or follower). */
export async function startZooKeeperContainers(size: number): Promise<ZooKeeperService> {
  const specs = [];
  for (let id = 1; id <= size; id++) {
    specs.push({
      id,
      clientPort: await freePort(),
      quorumPort: await freePort(),
      electionPort: await freePort(),
    });
  }
  const ensemble =
    size > 1
      ? specs.map((spec) => `server.${spec.id}=127.0.0.1:${spec.quorumPort}:${spec.electionPort}`)
      : [];
  const started = await Promise.allSettled(
    specs.map(async (spec): Promise<ZooKeeperMember & { process: ContainerProcess }> => {
      // As for local members: tickTime=200 keeps session timeouts short (0.4–4 s).
      const config = [
        'tickTime=200',
        `initLimit=${size > 1 ? 20 : 10}`,
        `syncLimit=${size > 1 ? 10 : 5}`,
        'dataDir=/data',
        `clientPort=${spec.clientPort}`,
        'clientPortAddress=127.0.0.1',
        'admin.enableServer=false',
        '4lw.commands.whitelist=ruok,srvr',
        ...ensemble,
        '',
      ].join('\n');
      const managed = await startContainer({
        name: `zookeeper ${spec.id} (docker)`,
        image: zookeeperImage(),
        command: ['zkServer.sh', 'start-foreground', '/conf/zoo.cfg'],
        environment: { ZK_SERVER_HEAP: '256', ZOO_MY_ID: String(spec.id) },
        files: [
          { target: '/conf/zoo.cfg', content: config },
          ...(size > 1 ? [{ target: '/data/myid', content: `${spec.id}\n` }] : []),
        ],
        readyTimeoutMs: 90_000,
        // `ruok` says imok as soon as the process listens, before it serves; `srvr` names a
        // mode only once it does (standalone, or leader/follower of a quorum).
        ready: async () => {
          if ((await fourLetterWord('127.0.0.1', spec.clientPort, 'ruok')) !== 'imok') return false;
          const mode = await zookeeperMode(spec.clientPort);
          return size === 1 ? mode === 'standalone' : mode === 'leader' || mode === 'follower';
        },
      });
      return {
        id: spec.id,
        clientPort: spec.clientPort,
        connectString: `127.0.0.1:${spec.clientPort}`,
        // Inside the member's own container.
        dataDir: '/data',
        process: managed,
      };
    }),
  );
  const members = started.flatMap((result) =>
    result.status === 'fulfilled' ? [result.value] : [],
  );
  const removeAll = () => Promise.all(members.map((member) => member.process.remove()));
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await removeAll();
    throw failed.reason;
  }
  const base = zookeeperService(
    members.map((member) => member.connectString).join(','),
    members,
    false,
  );
  return {
    ...base,
    async stop() {
      await removeAll();
    },
  };
}
