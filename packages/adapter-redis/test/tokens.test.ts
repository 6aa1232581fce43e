import { readFileSync } from 'node:fs';
import { redisAvailable } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { redisBackend } from '../src/index.js';
import { useRedis } from './support.js';

const architecture = readFileSync(
  new URL('../../../docs/architecture.md', import.meta.url),
  'utf8',
);

/** The Redis server's clock in microseconds since 1970, as `TIME` says. */
async function timeMicros(client: Redis): Promise<bigint> {
  const [seconds = 0, micros = 0] = await client.time();
  return BigInt(seconds) * 1_000_000n + BigInt(micros);
}

describe.skipIf(!redisAvailable())('where a Redis token comes from', () => {
  const redis = useRedis();
  const closing: { close(): unknown }[] = [];
  afterAll(async () => {
    for (const one of closing) await one.close();
  });

  it("is the server's TIME in microseconds, as docs/architecture.md says (not a per-name counter)", async () => {
    const raw = new Redis(redis().url);
    closing.push({ close: () => raw.disconnect() });
    const backend = redisBackend({ url: redis().url });
    closing.push(backend);
    await backend.ready();
    const before = await timeMicros(raw);
    const first = await backend.tryAcquire({ name: 'clock/a', owner: 'o', ttlMs: 5_000 });
    const after = await timeMicros(raw);
    if (!first.granted) throw new Error('not granted');
    expect(first.grant.token).toBeGreaterThanOrEqual(before);
    expect(first.grant.token).toBeLessThanOrEqual(after);

    const row = architecture.split('\n').find((line) => line.startsWith('| redis |'));
    expect(row).toMatch(/`TIME` in microseconds/);
    expect(row).not.toMatch(/INCR|per-name counter/);
  });
});
