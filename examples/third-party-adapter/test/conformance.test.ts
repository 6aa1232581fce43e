import { createServer } from 'node:net';
import { redisBackend } from '@dlm/adapter-redis';
import { runConformance } from '@dlm/conformance';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import { afterAll, beforeAll, describe } from 'vitest';

/**
 * What a project outside the dlm repo writes to hold its backend to the dlm contract: the
 * published `@dlm/conformance` suite, a service started by testcontainers, and the backend
 * under test. Here that backend is `@dlm/adapter-redis`; a new adapter goes in its place.
 *
 * `DLM_TEST_REDIS_IMAGE` picks the image (default `redis:7`), so machines that cannot pull
 * (dlm's own CI) can use a locally built one.
 */

const image = process.env.DLM_TEST_REDIS_IMAGE?.trim() || 'redis:7';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address
          ? resolve(address.port)
          : reject(new Error('no port')),
      );
    });
  });
}

describe('a backend through the conformance suite, on a Redis container', () => {
  let container: StartedTestContainer | undefined;
  let url = '';

  beforeAll(async () => {
    // The host network puts the server on this machine's loopback: no port mapping, which
    // also works on an engine that has no bridge network (like the one dlm's CI starts).
    const port = await freePort();
    container = await new GenericContainer(image)
      .withNetworkMode('host')
      .withCommand(['redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', ''])
      .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/))
      .start();
    url = `redis://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await container?.stop();
  });

  runConformance('redis (testcontainers)', {
    // A fresh backend per test; the suite closes it afterwards.
    backend: async () => {
      const backend = redisBackend({ url });
      await backend.ready();
      return backend;
    },
  });
});
