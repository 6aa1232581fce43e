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
 * What is ahead of a request in the queue (the live entries that `bound` keeps), as core's
 * grant rule (grant-rule.ts) reads it, for a request in mode `shared` (a boolean parameter) with
 * `limit`: the nearest entry, the last one that must go first (for an exclusive request any; for
 * a shared one an exclusive entry, or a shared one with another limit), the shared entries with
 * its limit, and whether an exclusive holder holds the name.
 */
function ahead(parts: SqlParts, bound: string, shared: string, limit: string): string {
  const { waiters, table, liveEntry } = parts;
  return `ahead AS (
        SELECT id, coalesce(w.mode = 'shared' AND w.holder_limit = ${limit}, false) AS same
        FROM ${waiters} w WHERE name = $1 AND ${bound} AND ${liveEntry('w')}
      ), facts AS (
        SELECT (SELECT id FROM ahead ORDER BY id DESC LIMIT 1) AS nearest,
          (SELECT id FROM ahead WHERE NOT (${shared} AND same) ORDER BY id DESC LIMIT 1) AS blocking,
          (SELECT count(*)::int FROM ahead WHERE ${shared} AND same) AS shared_n,
          EXISTS (SELECT 1 FROM ${table} l WHERE l.name = $1 AND l.mode IS NULL
            AND l.expires_at > clock_timestamp()) AS held_exclusive
      )`;
}

/**
 * The rule's wait, after the grant function refused (no conflict): the entry that must go first;
 * else, for a shared request whose room the shared entries ahead take (an exclusive holder
 * aside), the nearest entry; else the holders (`holder_ms`, the end the function named).
 */
function waitedOn(parts: SqlParts, shared: string, limit: string): string {
  return `waiting AS (
        SELECT CASE WHEN try.granted OR try.conflict IS NOT NULL THEN NULL
          WHEN f.blocking IS NOT NULL THEN f.blocking
          WHEN ${shared} AND f.shared_n > 0 AND NOT f.held_exclusive
            AND coalesce(try.holders, 0) + f.shared_n >= ${limit} THEN f.nearest END AS id
        FROM try, facts f
      ), waited AS (
        SELECT w.id::text AS wait_id, ${parts.remaining('w')} AS wait_ms
        FROM waiting, ${parts.waiters} w WHERE w.id = waiting.id
      )`;
}

/** The answer of a join or look: the grant, a conflict, or what to sleep on. */
const answer = (holderMs = 'try.remaining_ms') => `try.granted,
        CASE WHEN try.granted THEN try.token::text END AS token, try.conflict, try.conflict_limit,
        (SELECT wait_id FROM waited) AS wait_id, (SELECT wait_ms FROM waited) AS wait_ms,
        ${holderMs} AS holder_ms, try.delayed`;

/**
 * One join and one look for both modes (the mode and limit are parameters), each one statement
 * that grants through the adapter's one grant function (acquire-sql.ts, under the name's row
 * lock) and, refused, says what the request waits for (the rule's order: its own holder and the
 * conflicts are the function's, then the entries ahead, then the holders).
 *
 * Parameters: `$1` name, `$2` owner, `$3` lease ms, `$4` key hash; join: `$5` the entry's ms,
 * `$6` the pid of this server's LISTEN connection (NULL while it has none), `$7` shared,
 * `$8` the limit (1 for exclusive), `$9` the lock-delay ms, `$10` the cap on holding ms (0: none);
 * look: `$5` the entry's id, `$6` shared, `$7` the limit, `$8` the lock-delay ms, `$9` the cap ms;
 * leave: `$1` the id; renew: `$1` ids, `$2` ms, `$3` the pid; sweep: `$1` limit; count: `$1` name,
 * `$2` the last id counted (NULL: every live entry).
 */
export function queueStatements(parts: SqlParts): QueueStatements {
  const { schema, prefix, waiters, notify, liveEntry } = parts;
  // The one grant (acquire-sql.ts), for `$1`..`$4`: shared or not, the limit, the gate, ahead.
  const acquire = (
    shared: string,
    limit: string,
    gate: string,
    count: string,
    delay: string,
    hold: string,
  ) =>
    `SELECT * FROM ${parts.fn('acquire')}($1, $2, $3::bigint, $4::text, ${shared}, ${limit}, ${gate}, ${count}, ${delay}::bigint, ${hold}::bigint)`;
  const entryEnds = (ms: string) => `clock_timestamp() + ${ms}::bigint * interval '1 millisecond'`;
  return {
    // Granted at once when nobody is queued (or it is the caller's own lease); else queued with
    // its mode, behind every live entry (read in the statement's snapshot). A conflict queues
    // nothing.
    queueJoin: `WITH try AS (
        ${acquire('$7::boolean', '$8::int', 'true', '0', '$9', '$10')}
      ), queued AS (
        INSERT INTO ${waiters} (id, name, owner, key_hash, expires_at, pid, mode, holder_limit)
        SELECT nextval('${schema}.${prefix}waiter_ids'), $1, $2, $4::text, ${entryEnds('$5')}, $6::int,
               CASE WHEN $7::boolean THEN 'shared' END, CASE WHEN $7::boolean THEN $8::int END
        FROM try WHERE NOT try.granted AND try.conflict IS NULL
        RETURNING id
      ), ${ahead(parts, 'true', '$7::boolean', '$8::int')}, ${waitedOn(parts, '$7::boolean', '$8::int')}
      -- Refused only because others queue, with room beside the shared ones: the look grants it.
      SELECT (SELECT id::text FROM queued) AS waiter, ${answer(`CASE WHEN $7::boolean
          AND f.blocking IS NULL AND NOT f.held_exclusive
          AND coalesce(try.holders, 0) + f.shared_n < $8::int THEN NULL ELSE try.remaining_ms END`)}
        FROM try, facts f`,
    // Entries ahead that are no longer live are deleted on the way (SKIP LOCKED: never waits),
    // each announced, so that a waiter asleep behind one wakes. Our own entry counts while its
    // end is ahead: after our LISTEN connection was made again, the next renewal gives it the
    // new connection. Granted, the entry leaves in the same statement.
    queueLook: `WITH me AS (
        SELECT id FROM ${waiters} WHERE id = $5 AND name = $1 AND expires_at > clock_timestamp()
      ), stale AS (
        ${LEFT(parts, `id IN (SELECT id FROM ${waiters} w WHERE name = $1 AND id < $5 AND NOT ${liveEntry('w')} FOR UPDATE SKIP LOCKED)`, '')}
      ), ${ahead(parts, 'id < $5', '$6::boolean', '$7::int')}, try AS (
        ${acquire('$6::boolean', '$7::int', 'false', `(SELECT CASE WHEN EXISTS (SELECT 1 FROM me) AND f.blocking IS NULL THEN f.shared_n ELSE 2147483647 END FROM facts f)`, '$8', '$9')}
      ), gone AS (
        ${LEFT(parts, 'id = $5 AND EXISTS (SELECT 1 FROM try WHERE try.granted)', 'granted')}
      ), told AS (
        SELECT ${notify('left', 'gone', '$3::bigint')} FROM gone
        UNION ALL SELECT ${notify('left', 'stale', '0')} FROM stale
      ), ${waitedOn(parts, '$6::boolean', '$7::int')}
      SELECT EXISTS (SELECT 1 FROM me) AS mine, ${answer()}, (SELECT count(*) FROM told) AS changed
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
    // NULL (no place) once the entry itself no longer counts.
    queueCount: `SELECT CASE WHEN $2::bigint IS NULL OR EXISTS (
          SELECT 1 FROM ${waiters} w WHERE id = $2::bigint AND ${liveEntry('w')})
        THEN (SELECT count(*)::int FROM ${waiters} w
          WHERE name = $1 AND ($2::bigint IS NULL OR id <= $2::bigint) AND ${liveEntry('w')})
        END AS n`,
  };
}
