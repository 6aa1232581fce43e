import { lockName, until } from '@dlm/conformance';
import { createLockService, type LockChange } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { lateBarrier, usePostgres } from './support.js';

/**
 * A grant without waiters or followers sends no NOTIFY (followers-sql.ts), so a server that
 * starts watching a name while a grant of it is in flight must not miss that grant: its
 * follower is written under the name's row lock, and its first read waits for the follower.
 * The grant is held between its decision (its look for followers) and its commit by a trigger
 * of the test's own on the lease table, which takes an advisory lock the test holds whenever a
 * row is written for an owner named `late…` (as test/token-order.test.ts does).
 */

const BARRIER = 4343;
const PREFIX = 'fol_';

describe.skipIf(!postgresAvailable())('postgres: a watch that starts during a grant', () => {
  const scope = usePostgres(PREFIX);
  const { admin, open } = scope;
  const barrier = lateBarrier(scope, PREFIX, BARRIER);

  it('the watcher reads the grant that committed before its follower, and hears the release', async () => {
    const [granting, watching] = [
      createLockService({ backend: await open() }),
      createLockService({ backend: await open() }),
    ];
    await barrier.install(['leases']);
    const name = lockName('followed-late');
    const changes: LockChange[] = [];
    let stop = () => {};
    await admin().query('SELECT pg_advisory_lock($1)', [BARRIER]);
    try {
      // The grant has looked for followers (none) and waits at the barrier, its row held.
      const grant = granting.acquire({ name, owner: 'late-1', ttlMs: 60_000 });
      await until(async () => (await barrier.waiting()) >= 1, 5_000);
      stop = watching.watch(name, (change) => changes.push(change));
      // The follower's registration waits behind the grant's row; the read waits for it.
      const read = watching.get(name);
      await until(async () => (await barrier.waiting()) >= 2, 5_000);
      await admin().query('SELECT pg_advisory_unlock($1)', [BARRIER]);
      const lease = await grant;
      expect(await read).toMatchObject({ owner: 'late-1', token: lease.token });
      // Followed now: the release is announced to the watching server.
      await granting.release({ name, token: lease.token, leaseKey: lease.leaseKey });
      await until(() => changes.some((change) => change.type === 'released'), 3_000);
      expect(changes.find((change) => change.type === 'released')).toMatchObject({
        held: false,
        token: lease.token,
      });
    } finally {
      stop();
      await admin().query('SELECT pg_advisory_unlock_all()');
      await admin().query(`DROP TRIGGER IF EXISTS ${PREFIX}leases_barrier ON ${PREFIX}leases`);
      await granting.close();
      await watching.close();
    }
  });
});
