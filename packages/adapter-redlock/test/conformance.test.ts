import { runConformance } from '@dlm/conformance';
import { type RedisService, redisAvailable, startRedisNodes } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redlockBackend } from '../src/index.js';

const enabled = redisAvailable();

for (const count of [3, 5]) {
  describe.skipIf(!enabled)(`redlock adapter, ${count} nodes`, () => {
    let nodes: RedisService[] = [];
    beforeAll(async () => {
      nodes = await startRedisNodes(count);
    });
    afterAll(async () => {
      await Promise.all(nodes.map((node) => node.stop(1_000)));
    });

    runConformance(`redlock (${count} nodes)`, {
      backend: async () => {
        const backend = redlockBackend({ urls: nodes.map((node) => node.url) });
        await backend.ready();
        return backend;
      },
      extraTests: (ctx) => {
        it('declares best-effort fencing, shared modes, and no queue of its own', () => {
          expect(ctx.caps).toMatchObject({
            fencing: 'best-effort',
            sharedModes: true,
            fairQueue: false,
          });
        });
      },
    });
  });
}
