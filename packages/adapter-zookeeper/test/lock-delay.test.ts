import { expectDelayedTryLocks, lockName, sleep, waitThrough } from '@dlm/conformance';
import { zookeeperAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lockPaths } from '../src/zk-paths.js';
import { rawCall, useZooKeeper } from './support.js';

const run = zookeeperAvailable();
const prefix = '/dlm-delay';

/**
 * The ZooKeeper side of lock-delay: the delay is the end marker the name node's last write left
 * (`<reason>:<token>:x<deadline>:d<delay>`, zk-data.ts's `delayEndOf`), read on ZooKeeper's
 * clock. These tests write that marker themselves, so that only the grant's check of it can keep
 * a try-lock or a waiter out; they fail if a grant (either mode, a try-lock, a waiter's join or
 * look) does not check it.
 */
describe.skipIf(!run)('zookeeper lock-delay marker', () => {
  const scope = useZooKeeper(prefix);
  const parent = (name: string) => lockPaths(prefix).parent(name);

  /** ZooKeeper's time now: the mtime of a write of the test's own. */
  async function zkNow(): Promise<number> {
    const scratch = `${prefix}/scratch`;
    await rawCall((done) => scope.raw().mkdirp(scratch, (error) => done(error)));
    const stat = await rawCall<{ mtime: Buffer }>((done) =>
      scope.raw().setData(scratch, Buffer.alloc(0), -1, (error, written) => done(error, written)),
    );
    return Number(stat.mtime.readBigInt64BE(0));
  }

  /** `name` released, then its name node marked as revoked with a delay of `delayMs`. */
  async function markDelayed(name: string, delayMs: number): Promise<void> {
    const backend = scope.open();
    const lease = await backend.tryAcquire({ name, owner: 'a', ttlMs: 60_000 });
    if (!lease.granted) throw new Error('expected a grant');
    await backend.release({ name, token: lease.grant.token });
    const marker = `revoked:${lease.grant.token}:x${(await zkNow()) + 60_000}:d${delayMs}`;
    await rawCall((done) =>
      scope.raw().setData(parent(name), Buffer.from(marker), -1, (error) => done(error)),
    );
  }

  it('a delay in the end marker refuses a try-lock of either mode, with the delay left', async () => {
    const backend = scope.open();
    const name = lockName('zk-delay-try');
    await markDelayed(name, 30_000);
    await expectDelayedTryLocks(backend, name, { atLeastMs: 25_000, atMostMs: 30_000 });
    expect(await backend.lockDelayOf?.(name)).toBeGreaterThan(25_000);
  });

  it('waiters on two servers are granted only once the delay is over, then in order', async () => {
    const name = lockName('zk-delay-wait');
    await markDelayed(name, 2_000);
    const markedAt = performance.now();
    const backend = scope.open();
    const first = waitThrough(backend, { name, owner: 'w1' });
    await sleep(200);
    const second = waitThrough(scope.open(), { name, owner: 'w2', ttlMs: 1_000 });
    const lease = await first;
    const waitedMs = performance.now() - markedAt;
    expect(waitedMs).toBeGreaterThanOrEqual(1_900);
    expect(waitedMs).toBeLessThan(3_500);
    expect(lease.owner).toBe('w1');
    await backend.release({ name, token: lease.token });
    expect((await second).token).toBeGreaterThan(lease.token);
  });

  it('a release after the deadline comes too late: the lease had ended by expiry, the delay runs', async () => {
    const backend = scope.open();
    const name = lockName('zk-delay-late-release');
    const lease = await backend.tryAcquire({ name, owner: 'a', ttlMs: 300, lockDelayMs: 5_000 });
    if (!lease.granted) throw new Error('expected a grant');
    await sleep(600);
    await backend.release({ name, token: lease.grant.token });
    const refused = await backend.tryAcquire({ name, owner: 'b', ttlMs: 5_000 });
    expect(!refused.granted && refused.lockDelayRemainingMs).toBeGreaterThan(3_000);
    // Released in time, the same lease leaves no delay.
    const other = lockName('zk-delay-release');
    const timely = await backend.tryAcquire({
      name: other,
      owner: 'a',
      ttlMs: 5_000,
      lockDelayMs: 5_000,
    });
    if (!timely.granted) throw new Error('expected a grant');
    await backend.release({ name: other, token: timely.grant.token });
    expect((await backend.tryAcquire({ name: other, owner: 'b', ttlMs: 5_000 })).granted).toBe(
      true,
    );
  });
});
