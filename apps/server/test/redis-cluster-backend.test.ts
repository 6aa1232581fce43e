import { UsageError } from '@dlm/flags';
import { redisClusterAvailable, startRedisCluster } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { createBackend, createLogger, parseConfig } from '../src/index.js';

describe('--redis-cluster', () => {
  const nodes = '127.0.0.1:7000, 127.0.0.1:7001';

  it('configures a Redis Cluster by some of its nodes, by flag or environment', () => {
    const expected = {
      kind: 'redis',
      cluster: ['127.0.0.1:7000', '127.0.0.1:7001'],
      durable: false,
    };
    expect(parseConfig(['--backend', 'redis', '--redis-cluster', nodes], {})?.backend).toEqual(
      expected,
    );
    expect(parseConfig([], { DLM_BACKEND: 'redis', DLM_REDIS_CLUSTER: nodes })?.backend).toEqual(
      expected,
    );
    expect(
      parseConfig(['--backend', 'redis', '--redis-cluster', nodes, '--redis-min-replicas', '1'], {})
        ?.backend,
    ).toEqual({ ...expected, minReplicas: 1 });
  });

  it('refuses a node that is not host:port, --redis-url beside it, and another backend', () => {
    const bad: Array<[string[], RegExp]> = [
      [['--backend', 'redis', '--redis-cluster', '127.0.0.1'], /host:port.*got 127\.0\.0\.1$/],
      [['--backend', 'redis', '--redis-cluster', 'h:70000'], /got h:70000/],
      [['--backend', 'redis', '--redis-cluster', ','], /--redis-cluster is required/],
      [
        ['--backend', 'redis', '--redis-cluster', nodes, '--redis-url', 'redis://h:1'],
        /--redis-url and --redis-cluster exclude each other/,
      ],
      [
        ['--backend', 'redis', '--redis-cluster', nodes, '--redis-sentinels', 'h:1'],
        /--redis-sentinels and --redis-cluster exclude each other/,
      ],
      [
        ['--backend', 'redis', '--redis-cluster', nodes, '--redis-min-replicas', '-1'],
        /--redis-min-replicas/,
      ],
      [
        ['--backend', 'etcd', '--etcd-endpoints', 'http://h:1', '--redis-cluster', nodes],
        /--redis-cluster is for --backend redis, but the backend is etcd/,
      ],
    ];
    for (const [argv, message] of bad) {
      expect(() => parseConfig(argv, {})).toThrow(UsageError);
      expect(() => parseConfig(argv, {})).toThrow(message);
    }
  });
});

describe.runIf(redisClusterAvailable())('createBackend on a Redis Cluster', () => {
  it('opens the cluster backend: grants across the masters, fencing declared best-effort', {
    timeout: 90_000,
  }, async () => {
    const cluster = await startRedisCluster();
    try {
      const config = parseConfig(['--backend', 'redis', '--redis-cluster', cluster.addresses[0]!]);
      const backend = await createBackend(config!.backend, createLogger('silent'));
      try {
        expect(backend.capabilities.fencing).toBe('best-effort');
        // One seed node is enough: the client discovers the others and their slots.
        for (let i = 0; i < 12; i++) {
          const name = `server/${i}`;
          const result = await backend.tryAcquire({ name, owner: 'o', ttlMs: 10_000 });
          expect(result.granted).toBe(true);
        }
        expect(await backend.list?.('server/')).toHaveLength(12);
      } finally {
        await backend.close();
      }
    } finally {
      await cluster.stop();
    }
  });
});
