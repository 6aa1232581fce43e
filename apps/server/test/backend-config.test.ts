import { redisAvailable, redisManaged, startRedis } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { createBackend, createLogger, parseConfig, startServer } from '../src/index.js';

describe('backend flags', () => {
  it('declares a Redis durable only when told to, by flag or environment', () => {
    const url = ['--backend', 'redis', '--redis-url', 'redis://127.0.0.1:6390'];
    expect(parseConfig(url, {})?.backend).toEqual({
      kind: 'redis',
      url: 'redis://127.0.0.1:6390',
      durable: false,
    });
    expect(parseConfig([...url, '--redis-durable'], {})?.backend).toMatchObject({ durable: true });
    expect(parseConfig(url, { DLM_REDIS_DURABLE: '1' })?.backend).toMatchObject({ durable: true });
    expect(parseConfig(url, { DLM_REDIS_DURABLE: '0' })?.backend).toMatchObject({
      durable: false,
    });
  });
});

describe.runIf(redisAvailable() && redisManaged())('createBackend on Redis', () => {
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
