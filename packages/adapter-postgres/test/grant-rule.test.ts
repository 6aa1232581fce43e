import { lockName } from '@dlm/conformance';
import { GRANT_RULE_CASES, type GrantRuleCase } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import { statements } from '../src/sql.js';
import { usePostgres } from './support.js';

const run = postgresAvailable();
const PREFIX = 'rule_';

/**
 * The SQL translation of core's grant rule (the queue's look, queue-sql.ts, over the adapter's
 * grant function, acquire-sql.ts) against the rule's own case table: each case's holders and
 * queue entries are written into a real PostgreSQL as the adapter keeps them, then the real
 * look statement runs for the request's entry behind them, and its answer must say what the
 * table says.
 */
describe.skipIf(!run)(
  "the PostgreSQL queue's SQL against core's grant rule (its case table)",
  () => {
    const { admin, open } = usePostgres(PREFIX);
    const sql = statements('public', PREFIX);
    beforeAll(async () => {
      // The schema, before the test writes rows.
      await open();
    });

    it.each(GRANT_RULE_CASES.map((one) => [one.name, one] as const))(
      '%s',
      async (_name, testCase) => {
        expect(await answer(admin(), sql.queueLook, testCase)).toEqual(testCase.expect);
      },
    );

    it('catches a translation that gets a case wrong (planted: the entries ahead not counted)', async () => {
      const planted = sql.queueLook.replaceAll(
        'WHERE name = $1 AND id < $5 AND',
        'WHERE false AND',
      );
      expect(planted).not.toBe(sql.queueLook);
      const wrong: string[] = [];
      for (const testCase of GRANT_RULE_CASES) {
        const got = await answer(admin(), planted, testCase);
        if (JSON.stringify(got) !== JSON.stringify(testCase.expect)) wrong.push(testCase.name);
      }
      expect(wrong).toContain('exclusive, free, behind an entry: waits for the nearest entry');
    });
  },
);

interface Client {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

const ownerOf = (index: number, own: boolean | undefined) => (own ? 'me' : `h${index}`);
const until = (ms: number) => `clock_timestamp() + ${ms} * interval '1 millisecond'`;

/** Writes the case's holders and entries (and the request's entry behind them); its id. */
async function setUp(client: Client, name: string, testCase: GrantRuleCase): Promise<string> {
  const { holders, ahead, request } = testCase;
  const shared = holders.filter((holder) => holder.mode === 'shared');
  for (const [index, holder] of holders.entries()) {
    const owner = ownerOf(index, holder.own);
    if (holder.mode === 'exclusive') {
      await client.query(
        `INSERT INTO ${PREFIX}leases (name, owner, token, expires_at, key_hash)
          VALUES ($1, $2, $3, ${until(holder.remainingMs)}, $4)`,
        [name, owner, 100 + index, `k-${owner}`],
      );
      continue;
    }
    await client.query(
      `INSERT INTO ${PREFIX}holders (name, token, owner, expires_at, key_hash)
        VALUES ($1, $2, $3, ${until(holder.remainingMs)}, $4)`,
      [name, 100 + index, owner, `k-${owner}`],
    );
  }
  if (shared.length > 0) {
    // The group row: the highest token, the latest end, the holders' limit.
    const latest = Math.max(...shared.map((holder) => holder.remainingMs));
    await client.query(
      `INSERT INTO ${PREFIX}leases (name, owner, token, expires_at, mode, holder_limit)
        VALUES ($1, '', $2, ${until(latest)}, 'shared', $3)`,
      [name, 100 + holders.length - 1, shared[0]!.limit],
    );
  }
  const delayMs = testCase.lockDelayRemainingMs;
  const exclusive = holders.findIndex((holder) => holder.mode === 'exclusive');
  if (delayMs !== undefined && exclusive >= 0) {
    // The holder's own delay, to start at its end.
    await client.query(`UPDATE ${PREFIX}leases SET delay_ms = $2 WHERE name = $1`, [
      name,
      delayMs - holders[exclusive]!.remainingMs,
    ]);
  } else if (delayMs !== undefined) {
    // An exclusive lease that ended a second ago, its delay running on.
    await client.query(
      `INSERT INTO ${PREFIX}leases (name, owner, token, expires_at, delay_ms)
        VALUES ($1, 'gone', 99, ${until(-1_000)}, $2)`,
      [name, delayMs + 1_000],
    );
  }
  const ids: string[] = [];
  for (const entry of [...ahead, request]) {
    const isShared = entry.mode === 'shared';
    const inserted = await client.query(
      `INSERT INTO ${PREFIX}waiters (id, name, owner, key_hash, expires_at, mode, holder_limit)
        VALUES (nextval('${PREFIX}waiter_ids'), $1, 'w', NULL, ${until(60_000)}, $2, $3)
        RETURNING id::text AS id`,
      [name, isShared ? 'shared' : null, isShared ? entry.limit : null],
    );
    ids.push((inserted.rows[0] as { id: string }).id);
  }
  return ids.at(-1)!;
}

/** The look statement's answer to the case, in the table's terms. */
async function answer(client: Client, look: string, testCase: GrantRuleCase) {
  const name = lockName('rule');
  const mine = await setUp(client, name, testCase);
  const { request } = testCase;
  const ownIndex = testCase.holders.findIndex((holder) => holder.own);
  const result = await client.query(look, [
    name,
    'me',
    10_000,
    'k-me',
    mine,
    request.mode === 'shared',
    request.limit,
    0,
    0,
  ]);
  const row = result.rows[0] as {
    granted: boolean;
    token: string | null;
    conflict: string | null;
    conflict_limit: number | null;
    wait_id: string | null;
    holder_ms: string | null;
    delayed: boolean;
  };
  if (row.delayed) return { kind: 'wait-delay' };
  if (row.granted) {
    const refreshed = ownIndex >= 0 && row.token === String(100 + ownIndex);
    return { kind: refreshed ? 'refresh' : 'grant' };
  }
  if (row.conflict === 'mode') return { kind: 'conflict', conflict: { field: 'mode' } };
  if (row.conflict === 'limit') {
    return { kind: 'conflict', conflict: { field: 'limit', limit: Number(row.conflict_limit) } };
  }
  if (row.wait_id !== null) {
    const ids = await client.query(
      `SELECT id::text AS id FROM ${PREFIX}waiters WHERE name = $1 ORDER BY id`,
      [name],
    );
    const entry = (ids.rows as { id: string }[]).findIndex((one) => one.id === row.wait_id);
    return { kind: 'wait-entry', entry };
  }
  // Waiting on the holders: the one whose lease left is the time the statement answered.
  const holderMs = Number(row.holder_ms);
  let holder = -1;
  testCase.holders.forEach((one, index) => {
    if (Math.abs(one.remainingMs - holderMs) < 500) holder = index;
  });
  return { kind: 'wait-holder', holder };
}
