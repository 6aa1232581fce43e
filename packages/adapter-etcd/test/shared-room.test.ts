import { until } from '@dlm/conformance';
import { createLockService, type Lease, type LockBackend, type LockService } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { etcdBackend } from '../src/index.js';
import { lockNames, useEtcd, waiterKeys } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-shared-room');
const prefix = 'shared-room-test/';

/** An etcd client whose transactions wait while `close()` holds its gate shut. */
function gatedClient(hosts: string[]) {
  const client = new Etcd3({ hosts });
  let gate: Promise<void> | undefined;
  let open = () => {};
  const txn = client.kv.txn.bind(client.kv);
  client.kv.txn = async (...args: Parameters<typeof txn>) => {
    while (gate) await gate;
    return txn(...args);
  };
  return {
    client,
    close() {
      gate = new Promise((resolve) => {
        open = () => {
          gate = undefined;
          resolve();
        };
      });
    },
    open: () => open(),
  };
}

describe.skipIf(!run)('etcd shared waiters: granted side by side (issue 29, lever 6)', () => {
  const { etcd, raw, open } = useEtcd(prefix);
  const opened: { backend: LockBackend; client: Etcd3 }[] = [];
  afterAll(async () => {
    for (const { backend, client } of opened) {
      await backend.close();
      client.close();
    }
  });
  const semaphore = (service: LockService, name: string, owner: string, limit: number) =>
    service.acquire({ name, owner, ttlMs: 5_000, waitMs: 10_000, mode: 'shared', limit });

  it('a shared waiter is granted a free permit while the waiter ahead of it has not committed its own grant', async () => {
    const name = lockName('side-by-side');
    const holders = open();
    const permit = async (owner: string) => {
      const result = await holders.tryAcquire({
        name,
        owner,
        ttlMs: 5_000,
        mode: 'shared',
        limit: 2,
      });
      if (!result.granted) throw new Error(`expected ${owner} to hold a permit`);
      return result.grant;
    };
    const held = [await permit('h1'), await permit('h2')];
    // Both permits held (h1, h2). The first waiter's server gets its transactions held back.
    const gated = gatedClient(etcd().endpoints);
    // A budget far above the test's: w1's held-back look must not fail and leave the queue.
    const gatedBackend = etcdBackend({
      client: gated.client,
      prefix,
      minTtlMs: 1_000,
      commandTimeoutMs: 120_000,
    });
    opened.push({ backend: gatedBackend, client: gated.client });
    const first = createLockService({ backend: gatedBackend });
    const behind = createLockService({ backend: open() });
    const firstGrant = semaphore(first, name, 'w1', 2);
    // Awaited below; on a failure path it must not go unhandled first.
    firstGrant.catch(() => undefined);
    await until(async () => (await waiterKeys(raw(), prefix, name)).length === 1);
    const behindGrant = semaphore(behind, name, 'w2', 2);
    await until(async () => (await waiterKeys(raw(), prefix, name)).length === 2);
    await until(() => behind.waiters(name) === 1, { what: 'w2 waiting' });
    gated.close();
    // Both permits free: w1 (ahead) takes one, w2 the other. w1's look cannot reach etcd, so
    // its entry stays; w2 must not wait for that entry's departure (its grant's commit). On the
    // old driver w2 slept on w1's entry until its own wait ran out (LOCK_HELD).
    for (const grant of held) await holders.release({ name, token: grant.token });
    let w2: Lease;
    try {
      w2 = await behindGrant;
    } finally {
      gated.open();
    }
    expect(w2.owner).toBe('w2');
    expect((await firstGrant).owner).toBe('w1');
    expect((await holders.inspect(name))?.holders?.length).toBe(2);
  });

  it('many shared and exclusive takers racing on one name: never more than the limit, never a writer beside anyone (S7)', async () => {
    const name = lockName('race');
    const limit = 3;
    const services = Array.from({ length: 10 }, () => createLockService({ backend: open() }));
    let readers = 0;
    let writers = 0;
    let most = 0;
    let violations = 0;
    let grants = 0;
    await Promise.all(
      services.map(async (service, index) => {
        for (let round = 0; round < 8; round += 1) {
          const write = (index + round) % 7 === 0;
          const lease = await service.acquire({
            name,
            owner: `c${index}-${round}`,
            ttlMs: 5_000,
            waitMs: 30_000,
            ...(write ? {} : { mode: 'shared' as const, limit }),
          });
          grants += 1;
          if (write) writers += 1;
          else readers += 1;
          most = Math.max(most, readers + writers);
          if (writers > 1 || (writers > 0 && readers > 0) || readers > limit) violations += 1;
          await new Promise((resolve) => setImmediate(resolve));
          if (write) writers -= 1;
          else readers -= 1;
          await service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
        }
      }),
    );
    expect(grants).toBe(80);
    expect(violations).toBe(0);
    expect(most).toBeLessThanOrEqual(limit);
  });
});
