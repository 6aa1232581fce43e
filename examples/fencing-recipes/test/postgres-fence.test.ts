import { type PostgresService, postgresAvailable, startPostgres } from '@dlm/test-services';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FENCED_TABLE_SQL, fencedWrite } from '../src/index.js';
import { lockName, staleHolderAndNewHolder, startLockServer } from './stale-holder.js';

const enabled = postgresAvailable();

describe.skipIf(!enabled)('PostgreSQL: a conditional UPDATE on a fence_token column', () => {
  let postgres: PostgresService;
  let db: pg.Pool;
  let locks: Awaited<ReturnType<typeof startLockServer>>;
  // A pooled connection that breaks while idle emits 'error' on the pool, and an 'error' with
  // no listener ends the process (pg's README: always listen). Kept, so the test it happened in
  // fails with the server's message instead of the run failing on an anonymous error.
  const poolErrors: string[] = [];

  beforeAll(async () => {
    [postgres, locks] = await Promise.all([startPostgres(), startLockServer()]);
    db = new pg.Pool({ connectionString: postgres.url, max: 5 });
    db.on('error', (error) => poolErrors.push(error.message));
    await db.query(FENCED_TABLE_SQL);
  });
  afterEach(() => {
    expect(poolErrors.splice(0)).toEqual([]);
  });
  afterAll(async () => {
    await db?.end();
    await locks?.close();
    await postgres?.stop();
  });

  const row = async (key: string) =>
    (
      await db.query<{ value: string; fence_token: string }>(
        'SELECT value, fence_token FROM fenced_resource WHERE key = $1',
        [key],
      )
    ).rows[0];

  it("refuses a stale holder's write after a newer holder wrote, with the server's real tokens", async () => {
    const name = lockName('pg');
    const { stale, current } = await staleHolderAndNewHolder(locks.a, locks.b, name);

    expect(await fencedWrite(db, name, current.token, 'written by B')).toBe(true);
    // A wakes from its pause and writes, not knowing its lease ended (its check came before
    // the pause): the database refuses it.
    expect(await fencedWrite(db, name, stale.token, 'written by A')).toBe(false);
    expect(await fencedWrite(db, name, stale.token, 'written by A', { upsert: false })).toBe(false);
    expect(await row(name)).toEqual({
      value: 'written by B',
      fence_token: current.token.toString(),
    });
    // The current holder may write again with the same token.
    expect(await fencedWrite(db, name, current.token, 'B again', { upsert: false })).toBe(true);
    expect((await row(name))?.value).toBe('B again');
    await current.release();
  });

  it('without the fence the stale write lands (the failure the recipe prevents)', async () => {
    const name = lockName('pg-unfenced');
    const { stale, current } = await staleHolderAndNewHolder(locks.a, locks.b, name);
    await db.query('INSERT INTO fenced_resource (key, value, fence_token) VALUES ($1, $2, $3)', [
      name,
      'written by B',
      current.token.toString(),
    ]);
    await db.query('UPDATE fenced_resource SET value = $2 WHERE key = $1', [name, 'written by A']);
    expect((await row(name))?.value).toBe('written by A');
    expect(stale.token).toBeLessThan(current.token);
    await current.release();
  });

  it('concurrent writers on separate connections: the highest token wins, whatever the order', async () => {
    const name = lockName('pg-race');
    const tokens = Array.from({ length: 40 }, (_, i) => BigInt(i + 1)).sort(
      () => Math.random() - 0.5,
    );
    const accepted = await Promise.all(
      tokens.map(async (token) => ({ token, ok: await fencedWrite(db, name, token, `v${token}`) })),
    );
    expect(await row(name)).toEqual({ value: 'v40', fence_token: '40' });
    // The 40 was accepted; anything written after it would have had to be ≥ 40.
    expect(accepted.find((a) => a.token === 40n)?.ok).toBe(true);
  });

  it('tokens beyond 2^53 compare exactly (bigint column, decimal strings on the wire)', async () => {
    const name = lockName('pg-big');
    const big = 2n ** 62n + 1n;
    expect(await fencedWrite(db, name, big, 'big')).toBe(true);
    expect(await fencedWrite(db, name, big - 1n, 'one less')).toBe(false);
    expect(await row(name)).toEqual({ value: 'big', fence_token: big.toString() });
  });
});
