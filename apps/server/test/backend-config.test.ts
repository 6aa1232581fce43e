import { breakable, startRedis } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { createBackend, createLogger, startServer } from '../src/index.js';

describe.runIf(breakable('redis'))('createBackend on Redis', () => {
  it('passes the declared durability to the adapter', async () => {
    const redis = await startRedis();
    const logger = createLogger('silent');
    try {
      const plain = await createBackend({ kind: 'redis', url: redis.url }, logger);
      expect(plain.capabilities.durableAcrossRestart).toBe(false);
      await plain.close();
      const server = await startServer({
        port: 0,
        backendConfig: { kind: 'redis', url: redis.url, durable: true },
        logger,
      });
      try {
        expect(server.backend.capabilities.durableAcrossRestart).toBe(true);
      } finally {
        await server.close();
      }
    } finally {
      await redis.kill();
    }
  });
});
