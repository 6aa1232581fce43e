import { expectDelayedTryLocks, failure, until, waitThrough } from '@dlm/conformance';
import { createLockService } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockNames, useEtcd, waiterKeys } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-delay');
const prefix = 'delay-test/';

/**
 * The etcd side of lock-delay (etcd-delay.ts): the delay is the key `<prefix>delay/<name>`, and
 * only that key keeps a free name from being granted. These tests put the key themselves, on a
 * lease far longer than they run, so that what they see comes from the grant transactions'
 * comparison and from the watch, never from a lease running out; they fail if a grant (a
 * try-lock, a waiter's look, either mode) does not check the key, or if a waiter is not woken by
 * its deletion.
 */
describe.skipIf(!run)('etcd lock-delay key', () => {
  const scope = useEtcd(prefix);

  /** Puts `name`'s delay key (a 5 s delay) on a 60 s lease of the test's own. */
  async function delayKey(name: string): Promise<void> {
    const lease = scope.raw().lease(60, { autoKeepAlive: false });
    await lease.put(`${prefix}delay/${name}`).value('5000');
  }

  it('a present delay key refuses a try-lock of either mode, with the delay left', async () => {
    const backend = scope.open();
    const name = lockName('try');
    await delayKey(name);
    await expectDelayedTryLocks(backend, name, { atLeastMs: 0, atMostMs: 5_000 });
    expect(await backend.lockDelayOf?.(name)).toBeGreaterThan(0);
    const service = createLockService({ backend });
    const refused = await failure(service.acquire({ name, owner: 'b', ttlMs: 5_000 }));
    expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(0);
  });

  it('a waiter sleeps while the key is there and is granted as soon as it is deleted', async () => {
    const backend = scope.open();
    const other = scope.open();
    const name = lockName('wake');
    await delayKey(name);
    // Two waiters, one per dlm server, in etcd's queue: neither may take the name.
    const first = waitThrough(backend, { name, owner: 'w1' });
    await until(async () => (await waiterKeys(scope.raw(), prefix, name)).length === 1, {
      timeoutMs: 5_000,
      what: 'the first waiter to queue',
    });
    const second = waitThrough(other, { name, owner: 'w2' });
    let settled = false;
    void first.finally(() => {
      settled = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(settled).toBe(false);
    // The key's lease has 58 s left: only the watch of its deletion can wake the head now.
    const deletedAt = performance.now();
    await scope.raw().delete().key(`${prefix}delay/${name}`);
    const lease = await first;
    expect(lease.owner).toBe('w1');
    expect(performance.now() - deletedAt).toBeLessThan(1_000);
    await backend.release({ name, token: lease.token });
    expect((await second).token).toBeGreaterThan(lease.token);
  });

  it('a grant with a delay puts the key on a lease past its own; a release deletes it', async () => {
    const backend = scope.open();
    const name = lockName('keep');
    const result = await backend.tryAcquire({ name, owner: 'a', ttlMs: 2_000, lockDelayMs: 3_000 });
    if (!result.granted) throw new Error('expected a grant');
    const key = `${prefix}delay/${name}`;
    const lockLease = await scope.raw().get(`${prefix}lock/${name}`).exec();
    const delayLease = await scope.raw().get(key).exec();
    const ttlOf = async (id: string) =>
      Number((await scope.raw().leaseClient.leaseTimeToLive({ ID: id })).grantedTTL);
    expect(await ttlOf(delayLease.kvs[0]!.lease)).toBe((await ttlOf(lockLease.kvs[0]!.lease)) + 3);
    expect(await backend.lockDelayOf?.(name)).toBe(0);
    await backend.release({ name, token: result.grant.token });
    expect(await scope.raw().get(key).string()).toBeNull();
    expect(await backend.lockDelayOf?.(name)).toBe(0);
  });
});
