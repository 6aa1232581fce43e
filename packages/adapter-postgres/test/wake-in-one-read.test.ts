import { lockName, sleep, until, waitThrough } from '@dlm/conformance';
import { postgresAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import { usePostgres } from './support.js';

/**
 * A waiter whose predecessor left with the lock sleeps on that holder without a look (core's
 * wait loop). When the grant's departure and the holder's end reach its server in ONE read of
 * the LISTEN stream (its event loop was busy while both committed, as under load), both are
 * reported before the woken waiter runs again: the end must still wake it, or it sleeps out the
 * whole lease (the 10 s stalls of the three-server FIFO test).
 *
 * Made to happen on demand: a trigger of the test's own holds the look that grants a `late…`
 * waiter at its entry's delete (the name's row locked, the grant written), a revocation waits
 * behind it, and the test blocks its own process while it lets the look go: both commits, and
 * their NOTIFYs, are then waiting in the socket when the process reads again.
 */

const BARRIER = 4343;
const PREFIX = 'wake_';

const run = postgresAvailable();

describe.skipIf(!run)('postgres: changes heard in one read of the LISTEN stream', () => {
  const { admin, open } = usePostgres(PREFIX);

  beforeAll(async () => {
    await open();
    await admin().query(`CREATE OR REPLACE FUNCTION ${PREFIX}barrier() RETURNS trigger
      LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.owner LIKE 'late%' THEN PERFORM pg_advisory_xact_lock(${BARRIER}); END IF;
        RETURN OLD;
      END $$`);
    await admin().query(`CREATE OR REPLACE TRIGGER ${PREFIX}waiters_barrier
      BEFORE DELETE ON ${PREFIX}waiters FOR EACH ROW EXECUTE FUNCTION ${PREFIX}barrier()`);
  });

  /** Whether one of dlm's statements waits for a lock: at the barrier, or a revocation. */
  async function waiting(what: 'at the barrier' | 'revoke'): Promise<boolean> {
    const result = await admin().query(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE application_name = 'dlm' AND wait_event_type = 'Lock'
          AND (CASE WHEN $1 THEN wait_event = 'advisory' ELSE query LIKE '%revoke%' END)`,
      [what === 'at the barrier'],
    );
    return (result.rows[0] as { n: number }).n > 0;
  }

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
      // At the entry's end `late` looks, is granted, and is held at its entry's delete.
      await until(() => waiting('at the barrier'), { timeoutMs: 5_000 });
      // A third server revokes `late`'s lease: it waits for the held grant to commit.
      const revoked = z.revoke!(name);
      await until(() => waiting('revoke'));
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
