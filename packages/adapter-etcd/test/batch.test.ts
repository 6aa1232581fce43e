import { sleep } from '@dlm/conformance';
import type { LockEvent } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockNames, useEtcdBackend } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('batch-test');

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((row) => row.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

describe.skipIf(!run)('etcd backend: transactions sent at once share one etcd transaction', () => {
  const env = useEtcdBackend('batch/');

  it('concurrent acquires and releases of many locks: each outcome as if alone, releases reported as releases, fewer proposals', async () => {
    const names = Array.from({ length: 40 }, (_, index) => lockName(`many-${index}`));
    const events: LockEvent[] = [];
    const stops = names.map((name) => env.backend.watch(name, (event) => events.push(event)));
    const before = await metric(env.etcd.endpoints[0]!, 'etcd_server_proposals_committed_total');
    for (let round = 0; round < 3; round += 1) {
      const grants = await Promise.all(
        names.map((name) => env.backend.tryAcquire({ name, owner: `o${round}`, ttlMs: 5_000 })),
      );
      const tokens = grants.map((result) => {
        if (!result.granted) throw new Error('expected a grant');
        return result.grant.token;
      });
      // Held: a second owner is refused, in a batch as well.
      const refused = await Promise.all(
        names.map((name) => env.backend.tryAcquire({ name, owner: 'other', ttlMs: 5_000 })),
      );
      expect(refused.every((result) => !result.granted)).toBe(true);
      const released = await Promise.all(
        names.map((name, index) => env.backend.release({ name, token: tokens[index]! })),
      );
      expect(released.every(Boolean)).toBe(true);
      // A stale token releases nothing.
      expect(await env.backend.release({ name: names[0]!, token: tokens[0]! })).toBe(false);
    }
    const after = await metric(env.etcd.endpoints[0]!, 'etcd_server_proposals_committed_total');
    // Alone: 3 rounds × 40 locks × 3 transactions (acquire, refused acquire, release) and 80
    // lease grants in the first round (later rounds reuse those leases) = 440 proposals.
    expect(after - before).toBeLessThan(220);
    await sleep(300);
    for (const stop of stops) stop();
    for (const name of names) {
      const mine = events.filter((event) => event.name === name);
      expect(mine.map((event) => event.type)).toEqual([
        'acquired',
        'released',
        'acquired',
        'released',
        'acquired',
        'released',
      ]);
      const tokens = mine.filter((event) => event.type === 'acquired').map((e) => e.token!);
      expect(tokens[0]! < tokens[1]! && tokens[1]! < tokens[2]!).toBe(true);
    }
  });

  it('many owners racing for one lock at once: exactly one is granted', async () => {
    const name = lockName('race');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        env.backend.tryAcquire({ name, owner: `racer-${index}`, ttlMs: 5_000 }),
      ),
    );
    const granted = results.filter((result) => result.granted);
    expect(granted).toHaveLength(1);
    const state = await env.backend.inspect(name);
    expect(granted[0]?.granted && granted[0].grant.token).toBe(state?.token);
  });
});
