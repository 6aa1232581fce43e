import { redisBackend } from '@dlm/adapter-redis';
import { runConformance, useService } from '@dlm/conformance';
import { redisAvailable, startRedis } from '@dlm/test-services';
import { describe } from 'vitest';

/**
 * What a project outside the dlm repo writes to hold its backend to the dlm contract: the
 * published `@dlm/conformance` suite, a real service for the backend, and the backend under
 * test. Here that backend is `@dlm/adapter-redis`; a new adapter goes in its place.
 *
 * The Redis comes from dlm's own test-service starter, like every test in this repo: a local
 * redis-server when one is installed, a container when asked (`DLM_TEST_SERVICES=docker`,
 * image from `DLM_TEST_REDIS_IMAGE`) or when no binary is there, or the user's own
 * (`DLM_TEST_REDIS_URL`). Outside the repo, start your service your own way (a binary, or
 * testcontainers: see the README).
 */

// Without any Redis the suite is skipped with a warning; with CI=true that is a failure.
describe.runIf(redisAvailable())('a backend through the conformance suite, on a real Redis', () => {
  // Started before the suite's tests, stopped after them.
  const redis = useService(() => startRedis());

  runConformance('redis (third-party example)', {
    // A fresh backend per test; the suite closes it afterwards.
    backend: async () => {
      const backend = redisBackend({ url: redis().url });
      await backend.ready();
      return backend;
    },
  });
});
