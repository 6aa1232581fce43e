import { runConformance } from '@dlm/conformance';
import { type EtcdService, etcdAvailable, etcdManaged, startEtcd } from '@dlm/test-services';
import { afterAll, beforeAll, describe } from 'vitest';
import { etcdBackend } from '../src/index.js';

const run = etcdAvailable();

// etcd's shortest lease is 1.5 election timeouts rounded up to a second: a 500 ms election
// timeout makes it 1 s (2 s with etcd's default 1 s), which keeps the expiry tests short.
const timing = { heartbeatIntervalMs: 50, electionTimeoutMs: 500 };
const minTtlMs = 1_000;

describe.skipIf(!run)('etcd adapter', () => {
  let etcd: EtcdService;
  beforeAll(async () => {
    etcd = await startEtcd(timing);
  });
  afterAll(async () => {
    await etcd?.stop();
  });

  runConformance('etcd', {
    backend: () =>
      etcdBackend({ endpoints: etcd.endpoints, ...(etcd.external ? {} : { minTtlMs }) }),
    ...(etcdManaged()
      ? {
          restart: async () => {
            const member = etcd.members[0]!;
            await member.process.kill();
            await member.process.start();
          },
        }
      : {}),
  });
});
