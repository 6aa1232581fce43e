import type { QueueStatements, SqlParts } from './sql.js';

/**
 * The SQL of the cross-server fair queue: a waiters table ordered by a sequence. A waiter's
 * place is its entry's id (`nextval` of `<prefix>waiter_ids`, taken when it joins); the head is
 * the live entry with the smallest id. An entry is live while its `expires_at` (on the
 * database's clock) is ahead: the dlm server that made it renews all of its entries every third
 * of `waiterTtlMs`, so the entries of a server that died (or cannot reach the database) stop
 * counting within `waiterTtlMs`, and are deleted by the next look behind them or the sweep. An
 * entry also records the database process id of its server's LISTEN connection: when a dlm
 * server dies, the database drops its connections, and its entries stop counting at once.
 *
 * Every step is ONE statement (autocommit, READ COMMITTED): join (take the lock when nobody is
 * queued, else queue), look (at the head, take the lock and leave the queue in the same
 * statement; else report the entry ahead), leave, renew. A grant is the adapter's one grant
 * function (acquire-sql.ts), which decides under the name's row lock: the queue orders waiters,
 * and the lease row still guarantees that only one holds the lock.
 */

export function queueSchema({ schema, prefix, waiters }: SqlParts): string[] {
  return [
    `CREATE SEQUENCE IF NOT EXISTS "${schema}"."${prefix}waiter_ids" AS bigint MINVALUE 1`,
    `CREATE TABLE IF NOT EXISTS ${waiters} (
        id bigint PRIMARY KEY,
        name text NOT NULL,
        owner text NOT NULL,
        key_hash text,
        expires_at timestamptz NOT NULL,
        pid int
      )`,
    // Tables made by earlier builds gain the connection's pid (NULL: the end alone counts).
    `ALTER TABLE ${waiters} ADD COLUMN IF NOT EXISTS pid int`,
    // Looks find the entry ahead by (name, id).
    `CREATE INDEX IF NOT EXISTS "${prefix}waiters_name_id" ON ${waiters} (name, id)`,
  ];
}

/** Deletes entries, for a `left` NOTIFY whose `o` says why (`granted`, or '' for gone). */
const LEFT = (parts: SqlParts, from: string, why: '' | 'granted') =>
  `DELETE FROM ${parts.waiters} WHERE ${from} RETURNING name, id AS token, '${why}' AS owner`;

/**
 * Parameters: `$1` name, `$2` owner, `$3` lease ms, `$4` key hash; join: `$5` the entry's ms;
 * and `$6` the pid of this server's LISTEN connection (NULL while it has none); look: `$5` the
 * entry's id; leave: `$1` the id; renew: `$1` ids, `$2` ms, `$3` the pid; sweep: `$1` limit.
 */
export function queueStatements(parts: SqlParts): QueueStatements {
  const { schema, prefix, waiters, notify, remaining, liveEntry } = parts;
  // The one grant (acquire-sql.ts), for `$1`..`$4`: shared or not, the limit, the gate, ahead.
  const acquire = (shared: string, limit: string, gate: string, ahead: string) =>
    `SELECT * FROM ${parts.fn('acquire')}($1, $2, $3::bigint, $4::text, ${shared}, ${limit}, ${gate}, ${ahead})`;
  const entryEnds = (ms: string) => `clock_timestamp() + ${ms}::bigint * interval '1 millisecond'`;
  return {
    // The newest live entry (read in the statement's snapshot) is the one ahead of ours. A
    // conflict (the caller holds the name shared) queues nothing.
    queueJoin: `WITH last AS (
        SELECT id, expires_at FROM ${waiters} w
        WHERE name = $1 AND ${liveEntry('w')} ORDER BY id DESC LIMIT 1
      ), try AS (
        ${acquire('false', '1', 'true', '0')}
      ), queued AS (
        INSERT INTO ${waiters} (id, name, owner, key_hash, expires_at, pid)
        SELECT nextval('${schema}.${prefix}waiter_ids'), $1, $2, $4::text, ${entryEnds('$5')}, $6::int
        FROM try WHERE NOT try.granted AND try.conflict IS NULL
        RETURNING id
      )
      SELECT CASE WHEN try.granted THEN try.token::text END AS token,
             (SELECT id::text FROM queued) AS waiter,
             (SELECT id::text FROM last) AS ahead,
             (SELECT ${remaining('last')} FROM last) AS ahead_ms,
             try.remaining_ms AS holder_ms,
             try.conflict IS NOT DISTINCT FROM 'mode' AS mine_shared
        FROM try`,
    // Entries ahead that are no longer live are deleted on the way (SKIP LOCKED: never waits),
    // each announced, so that a waiter asleep behind one wakes. Our own entry counts while its
    // end is ahead: after our LISTEN connection was made again, the next renewal gives it the
    // new connection.
    queueLook: `WITH me AS (
        SELECT id FROM ${waiters} WHERE id = $5 AND name = $1 AND expires_at > clock_timestamp()
      ), ahead AS (
        SELECT id, expires_at FROM ${waiters} w
        WHERE name = $1 AND id < $5 AND ${liveEntry('w')} ORDER BY id DESC LIMIT 1
      ), stale AS (
        ${LEFT(parts, `id IN (SELECT id FROM ${waiters} w WHERE name = $1 AND id < $5 AND NOT ${liveEntry('w')} FOR UPDATE SKIP LOCKED)`, '')}
      ), try AS (
        ${acquire('false', '1', 'false', 'CASE WHEN EXISTS (SELECT 1 FROM me) AND NOT EXISTS (SELECT 1 FROM ahead) THEN 0 ELSE 1 END')}
      ), gone AS (
        ${LEFT(parts, 'id = $5 AND EXISTS (SELECT 1 FROM try WHERE try.granted)', 'granted')}
      ), told AS (
        SELECT ${notify('left', 'gone', '$3::bigint')} FROM gone
        UNION ALL SELECT ${notify('left', 'stale', '0')} FROM stale
      )
      SELECT EXISTS (SELECT 1 FROM me) AS mine,
             CASE WHEN try.granted THEN try.token::text END AS token,
             (SELECT id::text FROM ahead) AS ahead,
             (SELECT ${remaining('ahead')} FROM ahead) AS ahead_ms,
             try.remaining_ms AS holder_ms,
             try.conflict IS NOT DISTINCT FROM 'mode' AS mine_shared,
             (SELECT count(*) FROM told) AS changed
        FROM try`,
    // A shared request (`$7` its limit) joins: granted at once when the name has room and
    // nobody is queued (acquire-sql.ts decides under the name's row lock), else queued with its
    // mode; the first look follows at once.
    sharedJoin: `WITH try AS (
        ${acquire('true', '$7::int', 'true', '0')}
      ), queued AS (
        INSERT INTO ${waiters} (id, name, owner, key_hash, expires_at, pid, mode, holder_limit)
        SELECT nextval('${schema}.${prefix}waiter_ids'), $1, $2, $4::text, ${entryEnds('$5')}, $6::int,
               'shared', $7::int
        FROM try WHERE NOT try.granted AND try.conflict IS NULL
        RETURNING id
      )
      SELECT try.granted, try.token::text AS token, try.conflict, try.conflict_limit,
             (SELECT id::text FROM queued) AS waiter
        FROM try`,
    // A shared entry may be granted when no live exclusive entry is ahead of it, the name has
    // no exclusive holder, and its holders plus the live shared entries ahead are fewer than
    // the limit (`$6`). Otherwise it sleeps on the last exclusive entry ahead, else on the
    // nearest shared entry ahead when that one will take the room left, else on the holders.
    sharedLook: `WITH me AS (
        SELECT id FROM ${waiters} WHERE id = $5 AND name = $1 AND expires_at > clock_timestamp()
      ), stale AS (
        ${LEFT(parts, `id IN (SELECT id FROM ${waiters} w WHERE name = $1 AND id < $5 AND NOT ${liveEntry('w')} FOR UPDATE SKIP LOCKED)`, '')}
      ), exclusive AS (
        SELECT id, expires_at FROM ${waiters} w
        WHERE name = $1 AND id < $5 AND ${liveEntry('w')} AND w.mode IS DISTINCT FROM 'shared'
        ORDER BY id DESC LIMIT 1
      ), readers AS (
        SELECT count(*)::int AS n, max(id) AS nearest FROM ${waiters} w
        WHERE name = $1 AND id < $5 AND ${liveEntry('w')} AND w.mode = 'shared'
      ), try AS (
        ${acquire('true', '$6::int', 'false', 'CASE WHEN EXISTS (SELECT 1 FROM me) AND NOT EXISTS (SELECT 1 FROM exclusive) THEN (SELECT n FROM readers) ELSE 2147483647 END')}
      ), gone AS (
        ${LEFT(parts, 'id = $5 AND EXISTS (SELECT 1 FROM try WHERE try.granted)', 'granted')}
      ), told AS (
        SELECT ${notify('left', 'gone', '$3::bigint')} FROM gone
        UNION ALL SELECT ${notify('left', 'stale', '0')} FROM stale
      )
      SELECT EXISTS (SELECT 1 FROM me) AS mine,
             try.granted, try.token::text AS token, try.conflict, try.conflict_limit,
             try.remaining_ms, try.holders,
             (SELECT id::text FROM exclusive) AS exclusive,
             (SELECT ${remaining('exclusive')} FROM exclusive) AS exclusive_ms,
             (SELECT nearest::text FROM readers WHERE n > 0) AS reader,
             (SELECT ${remaining('w')} FROM ${waiters} w, readers r WHERE w.id = r.nearest) AS reader_ms,
             (SELECT count(*) FROM told) AS changed
        FROM try`,
    queueLeave: `WITH gone AS (${LEFT(parts, 'id = $1', '')})
      SELECT ${notify('left', 'gone', '0')} AS told FROM gone`,
    queueRenew: `UPDATE ${waiters} SET expires_at = ${entryEnds('$2')}, pid = coalesce($3::int, pid)
      WHERE id = ANY($1::bigint[]) AND expires_at > clock_timestamp()
      RETURNING id::text AS id`,
    queueSweep: `DELETE FROM ${waiters} WHERE id IN (
        SELECT id FROM ${waiters} w WHERE NOT ${liveEntry('w')}
        LIMIT $1::int FOR UPDATE SKIP LOCKED
      )`,
  };
}
