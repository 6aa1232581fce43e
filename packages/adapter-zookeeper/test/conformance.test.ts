import { runConformance } from '@dlm/conformance';
import {
  startZooKeeper,
  type ZooKeeperService,
  zookeeperAvailable,
  zookeeperManaged,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe } from 'vitest';
import { zookeeperBackend } from '../src/index.js';

const run = zookeeperAvailable();

describe.skipIf(!run)('zookeeper adapter', () => {
  let zk: ZooKeeperService;
  beforeAll(async () => {
    zk = await startZooKeeper();
  });
  afterAll(async () => {
    await zk?.stop();
  });

  runConformance('zookeeper', {
    backend: () => zookeeperBackend({ connect: zk.connectString, sessionTimeoutMs: 4_000 }),
    ...(zookeeperManaged()
      ? {
          restart: async () => {
            const member = zk.members[0]!;
            await member.process.kill();
            await member.process.start();
          },
        }
      : {}),
  });
});
