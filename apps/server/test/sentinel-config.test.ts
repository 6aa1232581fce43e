import { UsageError } from '@dlm/flags';
import { redisSentinelAvailable, startRedisSentinel } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { createLogger, parseConfig, startServer } from '../src/index.js';

const sentinelFlags = [
  '--backend',
  'redis',
  '--redis-sentinels',
  '127.0.0.1:26379,127.0.0.1:26380',
  '--redis-sentinel-name',
  'main',
];

describe('Redis Sentinel flags', () => {
  it('reads the sentinels, the master name and the replica settings, by flag or environment', () => {
    expect(
      parseConfig(
        [...sentinelFlags, '--redis-min-replicas', '1', '--redis-replica-timeout-ms', '200'],
        {},
      )?.backend,
    ).toEqual({
      kind: 'redis',
      sentinels: ['127.0.0.1:26379', '127.0.0.1:26380'],
      sentinelName: 'main',
      durable: false,
      minReplicas: 1,
      replicaTimeoutMs: 200,
    });
    expect(
      parseConfig(['--backend', 'redis'], {
        DLM_REDIS_SENTINELS: '127.0.0.1:26379',
        DLM_REDIS_SENTINEL_NAME: 'env-main',
        DLM_REDIS_MIN_REPLICAS: '2',
      })?.backend,
    ).toMatchObject({ sentinels: ['127.0.0.1:26379'], sentinelName: 'env-main', minReplicas: 2 });
  });

  it('is a usage error for a bad value, a missing name or another backend', () => {
    const cases: [string[], RegExp][] = [
      [
        ['--backend', 'redis', '--redis-sentinels', '127.0.0.1:26379'],
        /--redis-sentinel-name is required/,
      ],
      [
        [...sentinelFlags.slice(0, 3), 'localhost', '--redis-sentinel-name', 'm'],
        /host:port items .* got localhost/,
      ],
      [[...sentinelFlags.slice(0, 3), 'h:0', '--redis-sentinel-name', 'm'], /got h:0/],
      [
        [...sentinelFlags, '--redis-min-replicas', 'one'],
        /--redis-min-replicas must be .* got one/,
      ],
      [
        [...sentinelFlags, '--redis-replica-timeout-ms', '0'],
        /--redis-replica-timeout-ms must be .* milliseconds/,
      ],
      [
        ['--backend', 'redis', '--redis-url', 'redis://h:1', '--redis-sentinel-name', 'm'],
        /needs --redis-sentinels/,
      ],
      [
        ['--backend', 'etcd', '--etcd-endpoints', 'http://h:1', '--redis-sentinels', 'h:1'],
        /--redis-sentinels is for --backend redis, but the backend is etcd/,
      ],
      [['--memory', '--redis-min-replicas', '1'], /--redis-min-replicas is for --backend redis/],
    ];
    for (const [argv, message] of cases) {
      expect(() => parseConfig(argv, {}), argv.join(' ')).toThrow(UsageError);
      expect(() => parseConfig(argv, {}), argv.join(' ')).toThrow(message);
    }
  });
});

describe.runIf(redisSentinelAvailable())('dlm-server on Redis Sentinel', () => {
  it('serves from the master the sentinels name, with the declared fencing', async () => {
    const sentinel = await startRedisSentinel();
    const logger = createLogger('silent');
    try {
      const argv = sentinel.serverArgs;
      for (const [extra, fencing] of [
        [[], 'best-effort'],
        [['--redis-min-replicas', '1'], 'strict'],
      ] as const) {
        const config = parseConfig([...argv, ...extra], {})!;
        const server = await startServer({ port: 0, backendConfig: config.backend, logger });
        try {
          expect(server.backend.capabilities.fencing).toBe(fencing);
          const result = await server.backend.tryAcquire({
            name: `s/${fencing}`,
            owner: 'o',
            ttlMs: 5_000,
          });
          expect(result.granted).toBe(true);
        } finally {
          await server.close();
        }
      }
    } finally {
      await sentinel.stop();
    }
  }, 60_000);
});
