import { lockName } from '@dlm/conformance';
import { postgresAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import type { PostgresBackend } from '../src/index.js';
import { usePostgres } from './support.js';

/**
 * A server opening beside busy ones runs no DDL once the schema is current (its stamp, sql.ts):
 * `ALTER TABLE … ADD COLUMN IF NOT EXISTS` takes an ACCESS EXCLUSIVE lock on a table in use, so
 * a server starting on every open queued the others' requests behind it and deadlocked some
 * (`deadlock detected` in a full run: a waiter's join failed and its place in the queue with it).
 */

const PREFIX = 'stamp_';

describe.skipIf(!postgresAvailable())('postgres: the schema stamp', () => {
  const { admin, open } = usePostgres(PREFIX);

  async function stamp(): Promise<string | undefined> {
    const result = await admin().query(`SELECT stamp FROM ${PREFIX}schema_stamp WHERE id = 1`);
    return (result.rows[0] as { stamp: string } | undefined)?.stamp;
  }

  /** Whether `work` succeeds while another transaction holds ACCESS SHARE on the leases table. */
  async function settlesBesideAReader(work: () => Promise<unknown>): Promise<boolean> {
    await admin().query('BEGIN');
    try {
      await admin().query(`LOCK TABLE ${PREFIX}leases IN ACCESS SHARE MODE`);
      const settled = work().then(
        () => true,
        () => false,
      );
      const late = new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 5_000));
      return await Promise.race([settled, late]);
    } finally {
      await admin().query('COMMIT');
    }
  }

  it('a server opening on a current schema takes no table lock: it serves beside an open reader', async () => {
    await open();
    let second: PostgresBackend | undefined;
    const name = lockName('stamp');
    const served = await settlesBesideAReader(async () => {
      second = await open();
      expect(await second.tryAcquire({ name, owner: 'b', ttlMs: 10_000 })).toMatchObject({
        granted: true,
      });
    });
    // On the DDL path the open waits for the reader's transaction (ACCESS EXCLUSIVE) until its
    // statement times out: before the stamp, it failed here after 2 s.
    expect(served).toBe(true);
    expect(second).toBeDefined();
    expect(await stamp()).toMatch(/^[0-9a-f]{64}$/);
  });

  it('a stamp from other statements (an upgrade) runs the schema again and writes this one', async () => {
    await open();
    const current = await stamp();
    await admin().query(`UPDATE ${PREFIX}schema_stamp SET stamp = 'from an older version'`);
    await admin().query(`ALTER TABLE ${PREFIX}leases DROP COLUMN cap_at`);
    const backend = await open();
    expect(await stamp()).toBe(current);
    // The column the older schema lacked is back: an acquire with a cap on holding works.
    const name = lockName('upgraded');
    expect(
      await backend.tryAcquire({ name, owner: 'a', ttlMs: 10_000, maxHoldMs: 20_000 }),
    ).toMatchObject({ granted: true });
  });
});
