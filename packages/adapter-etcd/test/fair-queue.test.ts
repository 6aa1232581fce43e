import { granted, pendingAfter, sleep, until } from '@dlm/conformance';
import { createLockService, type LockService } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockNames, useEtcd, waiterKeys } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-queue');
const prefix = 'queue-test/';

describe.skipIf(!run)("etcd fair queue (core's wait loop over etcd's queue driver)", () => {
  const { raw, open } = useEtcd(prefix);
  /** The waiter keys of `name`'s queue, oldest first. */
  const queueKeys = (name: string) => waiterKeys(raw(), prefix, name);
  /** A dlm server over a new backend on the test's etcd. */
  const server = () => createLockService({ backend: open() });
  const queued = (service: LockService, name: string, owner: string) =>
    service.acquire({ name, owner, ttlMs: 5_000, waitMs: 60_000 });
  const untilQueued = (name: string, count: number) =>
    until(async () => (await queueKeys(name)).length >= count, {
      what: `${count} waiters in ${name}`,
    });

  it('a free lock with an empty queue is granted at once, without leaving a queue key', async () => {
    const name = lockName('free');
    expect((await queued(server(), name, 'a')).owner).toBe('a');
    expect(await queueKeys(name)).toEqual([]);
  });

  it('a try-lock does not take a free lock while anyone is queued for it', async () => {
    const backend = open();
    const name = lockName('no-barging');
    // A waiter at the head of the queue that has not taken the free lock yet (it is between the
    // release it was woken by and its own transaction).
    const waiterKey = `${prefix}queue/${name}\0head`;
    await raw().put(waiterKey).value('waiter');
    const barger = await backend.tryAcquire({ name, owner: 'barger', ttlMs: 5_000 });
    expect(barger.granted).toBe(false);
    expect(await backend.inspect(name)).toBeNull();
    await raw().delete().key(waiterKey);
    expect((await granted(backend, name, 'barger')).owner).toBe('barger');
  });

  it('a waiter whose queue entry vanished while it slept is not granted as if still queued (etcd-io/etcd#11456)', async () => {
    const service = server();
    const { backend } = service;
    const name = lockName('vanished');
    await granted(backend, name, 'holder');
    const waiting = queued(service, name, 'sleeper');
    await untilQueued(name, 1);
    const [sleeperKey] = await queueKeys(name);
    // In one revision: the sleeper's entry goes (as when its lease runs out), the lock is freed,
    // and a later waiter queues. The sleeper wakes at the head of nothing: nobody older than
    // it waits and the lock is free, yet it is no longer queued, so it must queue again behind
    // the later waiter rather than take the lock.
    const laterKey = `${prefix}queue/${name}\0later`;
    await raw()
      .if(sleeperKey!, 'Create', '>', 0)
      .then(
        raw().delete().key(sleeperKey!),
        raw().delete().key(`${prefix}lock/${name}`),
        raw().put(laterKey).value('later'),
      )
      .commit();
    expect(await pendingAfter(waiting, 500)).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    expect((await queueKeys(name))[0]).toBe(laterKey);
    await raw().delete().key(laterKey);
    expect((await waiting).owner).toBe('sleeper');
  });

  it("when a server's waiter lease ends (it stalled or died), its waiters leave the queue and the next waiter goes first", async () => {
    const name = lockName('lease-ended');
    const [a, b] = [server(), server()];
    const holder = await granted(a.backend, name, 'holder');
    const order: string[] = [];
    const track = (service: LockService, owner: string) =>
      queued(service, name, owner).then(async (lease) => {
        order.push(lease.owner);
        await sleep(20);
        await service.release({ name, token: lease.token });
      });
    const stalled = track(b, 'stalled');
    await untilQueued(name, 1);
    const next = track(a, 'next');
    await untilQueued(name, 2);
    // What etcd does when b's keepalives stop for the lease's TTL: the lease and its keys go.
    const [stalledKey] = await queueKeys(name);
    const lease = (await raw().get(stalledKey!).exec()).kvs[0]!.lease;
    await raw().leaseClient.leaseRevoke({ ID: lease });
    await a.backend.release({ name, token: holder.token });
    // b's waiter noticed its entry was gone and queued again (on a new lease), behind `next`.
    await Promise.all([stalled, next]);
    expect(order).toEqual(['next', 'stalled']);
    expect(await queueKeys(name)).toEqual([]);
  });

  it('a shared try-lock is granted exactly when a queued request would be at once (entries put by hand)', async () => {
    const backend = open();
    const name = lockName('try-vs-queue');
    const shared = (owner: string) =>
      backend.tryAcquire({
        name,
        owner,
        ttlMs: 10_000,
        keyHash: `k-${owner}`,
        mode: 'shared',
        limit: 3,
      });
    // Queue entries put by hand: a shared waiter (its id is `s<limit>.<random>`) that has not
    // looked yet, one with another limit, an exclusive one.
    const sharedEntry = `${prefix}queue/${name}\0s3.fake`;
    const otherLimitEntry = `${prefix}queue/${name}\0s4.fake`;
    const exclusiveEntry = `${prefix}queue/${name}\0abcd`;
    await raw().put(sharedEntry).value('waiter');
    expect((await shared('r1')).granted).toBe(true);
    // One holder and one shared waiter ahead: room for one more (limit 3).
    expect((await shared('r2')).granted).toBe(true);
    // Now the waiter ahead takes the last permit: no room.
    expect((await shared('r3')).granted).toBe(false);
    await raw().delete().key(sharedEntry);
    // A shared waiter with another limit goes first (it will be refused or granted alone).
    await raw().put(otherLimitEntry).value('waiter');
    expect((await shared('r3')).granted).toBe(false);
    await raw().delete().key(otherLimitEntry);
    // Room, but an exclusive waiter is queued: refused.
    await raw().put(exclusiveEntry).value('writer');
    expect((await shared('r3')).granted).toBe(false);
    await raw().delete().key(exclusiveEntry);
    expect((await shared('r3')).granted).toBe(true);
  });
});
