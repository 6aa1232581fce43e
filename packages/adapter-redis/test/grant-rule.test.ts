import { lockName } from '@dlm/conformance';
import { GRANT_RULE_CASES, type GrantRuleCase } from '@dlm/core';
import { redisAvailable } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NameKeys, nameKeys } from '../src/index.js';
import { type LuaScript, QUEUE_LOOK, runScript } from '../src/redis-scripts.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();
const PREFIX = 'dlm:';

/**
 * The Lua translation of core's grant rule (ACQUIRE_STEP with LOOK_AT, in redis-scripts.ts)
 * against the rule's own case table: each case's holders and queue entries are written into a
 * real Redis as the scripts keep them, then the real QUEUE_LOOK script looks at the request's
 * entry behind them, and its reply must say what the table says.
 */
describe.skipIf(!enabled)(
  "the Redis queue's Lua against core's grant rule (its case table)",
  () => {
    const redis = useRedis();
    let client: Redis;
    beforeAll(async () => {
      client = new Redis(redis().url, { maxRetriesPerRequest: 0 });
    });
    afterAll(() => client?.disconnect());

    it.each(GRANT_RULE_CASES.map((one) => [one.name, one] as const))(
      '%s',
      async (_name, testCase) => {
        expect(await answer(client, QUEUE_LOOK, testCase)).toEqual(testCase.expect);
      },
    );

    it('catches a translation that gets a case wrong (planted: shared entries with another limit counted as room)', async () => {
      const planted: LuaScript = {
        name: 'planted',
        // Not in the server's cache: runScript sends the source.
        sha: '0'.repeat(40),
        source: QUEUE_LOOK.source.replace(
          'if sameLimit(other, limit) then',
          "if string.match(other, '%.s') then",
        ),
      };
      expect(planted.source).not.toBe(QUEUE_LOOK.source);
      const wrong: string[] = [];
      for (const testCase of GRANT_RULE_CASES) {
        const got = await answer(client, planted, testCase);
        if (JSON.stringify(got) !== JSON.stringify(testCase.expect)) wrong.push(testCase.name);
      }
      expect(wrong).toContain(
        'shared behind a shared entry with another limit: waits for that entry',
      );
    });
  },
);

const holderOwner = (index: number, own: boolean | undefined) => (own ? 'me' : `h${index}`);
const entryId = (index: number, spec: { mode: string; limit: number }) =>
  `e${index}.${spec.mode === 'shared' ? `s${spec.limit}` : 'x'}`;

/** Writes the case's holders and entries (and the request's entry behind them) into Redis. */
async function setUp(client: Redis, keys: NameKeys, testCase: GrantRuleCase): Promise<string> {
  const [seconds, micros] = await client.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const writes = client.multi();
  testCase.holders.forEach((holder, index) => {
    const owner = holderOwner(index, holder.own);
    const token = String(100 + index);
    if (holder.mode === 'exclusive') {
      writes.set(keys.lock, `${token} k-${owner}:${owner}`, 'PX', holder.remainingMs);
      return;
    }
    writes.hset(keys.holders, token, `k-${owner}:${owner}`, `=k-${owner}:${owner}`, token);
    writes.hset(keys.holders, 'limit', holder.limit);
    writes.zadd(keys.holderEnds, now + holder.remainingMs, token);
    writes.set(`${keys.holderMark}${token}`, owner, 'PX', holder.remainingMs);
  });
  testCase.ahead.forEach((entry, index) => {
    writes.zadd(keys.queue, index + 1, entryId(index, entry));
    writes.zadd(keys.queueEnds, now + 60_000, entryId(index, entry));
  });
  if (testCase.lockDelayRemainingMs !== undefined) {
    // The delay an ended exclusive lease keeps (its value, the lease's delay, is not read here).
    writes.set(keys.delay, 60_000, 'PX', testCase.lockDelayRemainingMs);
  }
  const mine = `mine.${testCase.request.mode === 'shared' ? `s${testCase.request.limit}` : 'x'}`;
  writes.zadd(keys.queue, testCase.ahead.length + 1, mine);
  writes.zadd(keys.queueEnds, now + 60_000, mine);
  writes.set(keys.queueSeq, testCase.ahead.length + 1);
  await writes.exec();
  return mine;
}

/** QUEUE_LOOK's reply to the case, in the table's terms. */
async function answer(client: Redis, lua: LuaScript, testCase: GrantRuleCase) {
  const keys = nameKeys(PREFIX, lockName('rule'));
  const mine = await setUp(client, keys, testCase);
  const { request } = testCase;
  const shared = request.mode === 'shared';
  const reply = (await runScript(
    client,
    lua,
    [keys.lock, keys.fence, keys.queue, keys.queueEnds, keys.queueSeq],
    [
      'me',
      10_000,
      0,
      '',
      keys.hex,
      'k-me',
      60_000,
      '',
      mine,
      60_000,
      shared ? 's' : 'x',
      request.limit,
      0,
    ],
  )) as unknown[];
  const [kind, what, , fourth] = reply;
  if (kind === 1) return { kind: fourth === 1 ? 'grant' : 'refresh' };
  if (kind === -2) {
    return what === 'mode'
      ? { kind: 'conflict', conflict: { field: 'mode' } }
      : { kind: 'conflict', conflict: { field: 'limit', limit: Number(fourth) } };
  }
  if (kind !== 2) return { kind: `unexpected reply ${JSON.stringify(reply)}` };
  if (reply[5] === 'd') return { kind: 'wait-delay' };
  if (what !== '') {
    return {
      kind: 'wait-entry',
      entry: testCase.ahead.findIndex((e, i) => entryId(i, e) === what),
    };
  }
  // Waiting on the holders: the one whose lease left is the time the script answered.
  const holderMs = Number(fourth);
  let holder = -1;
  testCase.holders.forEach((one, index) => {
    if (Math.abs(one.remainingMs - holderMs) < 500) holder = index;
  });
  return { kind: 'wait-holder', holder };
}
