import { granted, pendingAfter, sleep, until } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockNames, useEtcd, waiterKeys } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-queue');
const prefix = 'queue-test/';

describe.skipIf(!run)('etcd fair queue (acquireQueued)', () => {
  const { raw, open } = useEtcd(prefix);
  /** The waiter keys of `name`'s queue, oldest first. */
  const queueKeys = (name: string) => waiterKeys(raw(), prefix, name);
  const queued = (backend: LockBackend, name: string, owner: string, signal: AbortSignal) =>
    backend.acquireQueued!({ name, owner, ttlMs: 5_000, signal });
  const untilQueued = (name: string, count: number) =>
    until(async () => (await queueKeys(name)).length >= count, {
      what: `${count} waiters in ${name}`,
    });

  it('declares a fair queue', () => {
    expect(open().capabilities.fairQueue).toBe(true);
  });

  it('a free lock with an empty queue is granted at once, without leaving a queue key', async () => {
    const backend = open();
    const name = lockName('free');
    const result = await queued(backend, name, 'a', new AbortController().signal);
    expect(result.granted).toBe(true);
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
    const backend = open();
    const name = lockName('vanished');
    await granted(backend, name, 'holder');
    const waiting = queued(backend, name, 'sleeper', new AbortController().signal);
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
    const result = await waiting;
    expect(result.granted && result.grant.owner).toBe('sleeper');
  });

  it("when a server's waiter lease ends (it stalled or died), its waiters leave the queue and the next waiter goes first", async () => {
    const name = lockName('lease-ended');
    const [a, b] = [open(), open()];
    const holder = await granted(a, name, 'holder');
    const order: string[] = [];
    const track = (backend: LockBackend, owner: string) =>
      queued(backend, name, owner, new AbortController().signal).then(async (result) => {
        if (!result.granted) throw new Error('expected a grant');
        order.push(result.grant.owner);
        await sleep(20);
        await backend.release({ name, token: result.grant.token });
      });
    const stalled = track(b, 'stalled');
    await untilQueued(name, 1);
    const next = track(a, 'next');
    await untilQueued(name, 2);
    // What etcd does when b's keepalives stop for the lease's TTL: the lease and its keys go.
    const [stalledKey] = await queueKeys(name);
    const lease = (await raw().get(stalledKey!).exec()).kvs[0]!.lease;
    await raw().leaseClient.leaseRevoke({ ID: lease });
    await a.release({ name, token: holder.token });
    // b's waiter noticed its entry was gone and queued again (on a new lease), behind `next`.
    await Promise.all([stalled, next]);
    expect(order).toEqual(['next', 'stalled']);
    expect(await queueKeys(name)).toEqual([]);
  });
});
