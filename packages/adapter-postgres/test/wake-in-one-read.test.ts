import { lockName, sleep, until, waitThrough } from '@dlm/conformance';
import { postgresAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import { lateBarrier, usePostgres } from './support.js';

/**
 * A waiter whose predecessor left with the lock sleeps on that holder without a look (core's
 * wait loop). When the grant's departure and the holder's end reach its server in ONE read of
 * the LISTEN stream (its event loop was busy while both committed, as under load), both are
 * reported before the woken waiter runs again: the end must still wake it, or it sleeps out the
 * whole lease (the 10 s stalls of the three-server FIFO test).
 *
 * Made to happen on demand: the late barrier (support.ts) holds the look that grants a `late…`
 * waiter as it writes the grant (the name's row locked), a revocation waits behind it, and the
 * test blocks its own process while it lets the look go: both commits, and their NOTIFYs, are
 * then waiting in the socket when the process reads again.
 */

const BARRIER = 4343;
const PREFIX = 'wake_';

const run = postgresAvailable();

describe.skipIf(!run)('postgres: changes heard in one read of the LISTEN stream', () => {
  const scope = usePostgres(PREFIX);
  const { admin, open } = scope;
  const barrier = lateBarrier(scope, PREFIX, BARRIER);

  beforeAll(async () => {
    await open();
    await barrier.install(['leases']);
  });

  async function entries(name: string): Promise<string[]> {
    const result = await admin().query(
      `SELECT owner FROM ${PREFIX}waiters WHERE name = $1 ORDER BY id`,
      [name],
    );
    return result.rows.map((row: { owner: string }) => row.owner);
  }

  it("a holder's end read together with its grant's departure wakes the waiter behind", async () => {
    const [x, y, z] = [await open(), await open(), await open()];
    const name = lockName('one-read');
    // The name's row, ended (as a fresh name's grant or a follower leaves it), for the revocation
    // to wait on; and an entry ahead of another server that stopped renewing it: it ends soon.
    await admin().query(
      `INSERT INTO ${PREFIX}leases (name, owner, token, expires_at) VALUES ($1, '', 0, 'epoch')`,
      [name],
    );
    await admin().query(
      `INSERT INTO ${PREFIX}waiters (id, name, owner, expires_at)
        VALUES (nextval('${PREFIX}waiter_ids'), $1, 'elsewhere', clock_timestamp() + interval '2 seconds')`,
      [name],
    );
    await admin().query('SELECT pg_advisory_lock($1)', [BARRIER]);
    try {
      // `late` on one server, behind the ending entry, with a lease far longer than the test.
      const late = waitThrough(x, { name, owner: 'late', ttlMs: 60_000 });
      await until(async () => (await entries(name)).length === 2);
      // The waiter under test on another server, asleep on `late`'s entry.
      let granted = false;
      const behind = waitThrough(y, { name, owner: 'behind' }).then(
        (lease) => {
          granted = true;
          return lease;
        },
        () => null,
      );
      await until(async () => (await entries(name)).length === 3);
      // At the entry's end `late` looks, and is held as it writes its grant.
      await until(async () => (await barrier.waiting()) >= 1, 5_000);
      // A third server revokes `late`'s lease: it waits for the held grant to commit.
      const revoked = z.revoke!(name);
      await until(async () => (await barrier.waiting()) >= 2, 5_000);
      // Let the grant go (the unlock is written before the process blocks), and read nothing
      // for a second: the grant, its departure and the revocation commit meanwhile.
      const unlocked = admin().query('SELECT pg_advisory_unlock($1)', [BARRIER]);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_000);
      await unlocked;
      expect(await revoked).toBe(true);
      expect((await late).owner).toBe('late');
      await Promise.race([behind, sleep(5_000)]);
      expect(granted).toBe(true);
      const lease = (await behind)!;
      expect(lease.owner).toBe('behind');
      await y.release({ name, token: lease.token });
      expect(await entries(name)).toEqual([]);
    } finally {
      await admin().query('SELECT pg_advisory_unlock_all()');
    }
  });
});
