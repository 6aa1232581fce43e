import { runConformance } from '@dlm/conformance';
import {
  type RedisClusterService,
  redisClusterAvailable,
  startRedisCluster,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe } from 'vitest';
import { redisClusterBackend } from '../src/index.js';

const enabled = redisClusterAvailable();

describe.skipIf(!enabled)('redis cluster adapter', () => {
  let cluster: RedisClusterService;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  }, 90_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  runConformance('redis cluster', {
    backend: async () => {
      const backend = redisClusterBackend({ nodes: cluster.addresses });
      await backend.ready();
      return backend;
    },
  });
});
