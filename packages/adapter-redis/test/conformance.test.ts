import { killAndStart, runConformance } from '@dlm/conformance';
import { redisAvailable, redisManaged } from '@dlm/test-services';
import { describe } from 'vitest';
import { redisBackend } from '../src/index.js';
import { queueProbe } from './queue-probe.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();

describe.skipIf(!enabled)('redis adapter', () => {
  const redis = useRedis();

  runConformance('redis', {
    backend: async () => {
      const backend = redisBackend({ url: redis().url });
      await backend.ready();
      return backend;
    },
    fairQueue: { entries: (name) => queueProbe({ url: redis().url }).entries(name) },
  });
});

// With AOF `appendfsync always` the adapter may declare durableAcrossRestart, and the suite's
// restart test (kill -9, start again with the same data) holds it to that.
describe.skipIf(!enabled || !redisManaged())('redis adapter, durable (AOF always)', () => {
  const redis = useRedis({ aof: true });

  runConformance('redis (durable)', {
    backend: async () => {
      const backend = redisBackend({ url: redis().url, durable: true });
      await backend.ready();
      return backend;
    },
    restart: () => killAndStart(redis()),
  });
});
