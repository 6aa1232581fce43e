import { embeddedBackend } from '@dlm/adapter-embedded';
import { redisBackend } from '@dlm/adapter-redis';
import { oneInstance, runConformance, useService } from '@dlm/conformance';
import { redisAvailable, startRedis } from '@dlm/test-services';
import { describe } from 'vitest';
import { httpRpcTransport } from './http-rpc-service.js';

// The conformance suite's core groups again, each call going through a dlm server's HTTP door
// (POST /v1/rpc) instead of core in process: the door adds no rule of its own and loses none.
// On the embedded backend and on Redis (an external one, shared by the two servers of the
// two-server tests).

// One backend for the file: the embedded store is the service itself (see its own suite).
runConformance('embedded', {
  ...oneInstance(() => embeddedBackend()),
  transport: httpRpcTransport,
});

describe.skipIf(!redisAvailable())('redis', () => {
  const redis = useService(
    () => startRedis(),
    (service) => service.stop(1_000),
  );
  runConformance('redis', {
    backend: async () => {
      const backend = redisBackend({ url: redis().url });
      await backend.ready();
      return backend;
    },
    transport: httpRpcTransport,
  });
});
