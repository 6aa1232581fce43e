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

/** An etcd client that counts its transactions, which wait while `close()` holds its gate shut. */
function gatedClient(hosts: string[]) {
  const client = new Etcd3({ hosts });
  let gate: Promise<void> | undefined;
  let open = () => {};
  let sent = 0;
  let ttlAsks = 0;
  const timeToLive = client.leaseClient.leaseTimeToLive.bind(client.leaseClient);
  client.leaseClient.leaseTimeToLive = (...args: Parameters<typeof timeToLive>) => {
    ttlAsks += 1;
    return timeToLive(...args);
  };
  const txn = client.kv.txn.bind(client.kv);
  client.kv.txn = async (...args: Parameters<typeof txn>) => {
    while (gate) await gate;
    sent += 1;
    return txn(...args);
  };
  return {
    client,
    /** Transactions sent so far. */
    sent: () => sent,
    /** Lease time-to-live asks so far (a waiter asks before it sleeps on a holder). */
    ttlAsks: () => ttlAsks,
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
  /** A server whose etcd client is gated and counted (a budget far above the test's). */
  const gatedServer = () => {
    const gated = gatedClient(etcd().endpoints);
    const backend = etcdBackend({
      client: gated.client,
      prefix,
      minTtlMs: 1_000,
      commandTimeoutMs: 120_000,
    });
    opened.push({ backend, client: gated.client });
    return { gated, service: createLockService({ backend }) };
  };
  /** A reader waiting for `name` on a gated server (its join sent). */
  const waitingReader = async (name: string) => {
    const { gated, service } = gatedServer();
    const reading = service.acquire({
      name,
      owner: 'reader',
      ttlMs: 5_000,
      waitMs: 30_000,
      mode: 'shared',
    });
    await until(() => service.waiters(name) === 1, { what: 'the reader waiting' });
    return { gated, reading };
  };
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
    // w1's look must not fail (and leave the queue) while held back: its budget is far above.
    const { gated, service: first } = gatedServer();
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

  it('a reader queued while a writer holds is granted by one transaction once the writer ends (no read first)', async () => {
    const name = lockName('behind-holder');
    const writers = open();
    const writer = await writers.tryAcquire({ name, owner: 'writer', ttlMs: 5_000 });
    if (!writer.granted) throw new Error('expected the writer to hold');
    const { gated, reading } = await waitingReader(name);
    expect(gated.sent()).toBe(1);
    await writers.release({ name, token: writer.grant.token });
    expect((await reading).owner).toBe('reader');
    // Its join, then its grant. Before, the look that the writer's end woke read first.
    expect(gated.sent()).toBe(2);
  });

  it('a reader queued behind a queued writer is granted by one transaction once that writer has come and gone', async () => {
    const name = lockName('behind-entry');
    const holders = open();
    const first = await holders.tryAcquire({ name, owner: 'first', ttlMs: 5_000 });
    if (!first.granted) throw new Error('expected the first writer to hold');
    const writerServer = createLockService({ backend: open() });
    const writing = writerServer.acquire({ name, owner: 'writer', ttlMs: 5_000, waitMs: 30_000 });
    await until(async () => (await waiterKeys(raw(), prefix, name)).length === 1);
    const { gated, reading } = await waitingReader(name);
    await holders.release({ name, token: first.grant.token });
    const writer = await writing;
    // The reader heard the writer's entry leave with the lock and sleeps on it (it asked its
    // lease's time left); only then does the writer's release wake it.
    await until(() => gated.ttlAsks() === 1, { what: 'the reader asleep on the writer' });
    await writerServer.release({ name, token: writer.token, leaseKey: writer.leaseKey });
    expect((await reading).owner).toBe('reader');
    // Its join, then its grant: no read when the writer took the lock, none when it let go.
    expect(gated.sent()).toBe(2);
  });
});
