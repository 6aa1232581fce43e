import { clusterTarget, killAndStart, runConformance } from '@dlm/conformance';
import {
  type EtcdService,
  etcdAvailable,
  etcdManaged,
  startEtcd,
  startEtcdCluster,
} from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe } from 'vitest';
import { etcdBackend } from '../src/index.js';

const run = etcdAvailable();

// etcd's shortest lease is 1.5 election timeouts rounded up to a second: a 500 ms election
// timeout makes it 1 s (2 s with etcd's default 1 s), which keeps the expiry tests short.
const timing = { heartbeatIntervalMs: 50, electionTimeoutMs: 500 };
const minTtlMs = 1_000;
/** etcdBackend's default key prefix: the fair-queue probe reads `<prefix>queue/<name>\0…`. */
const prefix = 'dlm/';

describe.skipIf(!run)('etcd adapter', () => {
  let etcd: EtcdService;
  let raw: Etcd3;
  beforeAll(async () => {
    etcd = await startEtcd(timing);
    raw = new Etcd3({ hosts: etcd.endpoints });
  });
  afterAll(async () => {
    raw?.close();
    await etcd?.stop();
  });

  runConformance('etcd', {
    backend: () =>
      etcdBackend({ endpoints: etcd.endpoints, ...(etcd.external ? {} : { minTtlMs }) }),
    fairQueue: {
      // The waiter keys of `name`'s queue, oldest first.
      entries: async (name) =>
        (await raw.getAll().prefix(`${prefix}queue/${name}\0`).sort('Create', 'Ascend').keys()).map(
          (key) => key.toString(),
        ),
    },
    ...(etcdManaged()
      ? {
          restart: () => killAndStart(etcd.members[0]!.process),
          cluster: async () => {
            const commandTimeoutMs = 2_000;
            const cluster = await startEtcdCluster(3, timing);
            const backend = etcdBackend({
              endpoints: cluster.endpoints,
              minTtlMs,
              commandTimeoutMs,
            });
            return clusterTarget(cluster, backend, { commandTimeoutMs });
          },
        }
      : {}),
  });
});
