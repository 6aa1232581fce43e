import { runConformance } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
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
  // Locks live in the ephemeral nodes of the backend's ZooKeeper session: closing a backend
  // ends its session and frees its locks, as a dlm server shutting down would. The suite's
  // restart test models ZooKeeper restarting under a dlm server that stays up, so instances
  // stay open (and their sessions alive) until the suite ends.
  const open: LockBackend[] = [];
  beforeAll(async () => {
    zk = await startZooKeeper();
  });
  afterAll(async () => {
    await Promise.all(open.map((backend) => backend.close()));
    await zk?.stop();
  });

  runConformance('zookeeper', {
    backend: () => {
      const backend = zookeeperBackend({ connect: zk.connectString, sessionTimeoutMs: 4_000 });
      open.push(backend);
      return backend;
    },
    cleanup: async () => {},
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
