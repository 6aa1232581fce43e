import { createHash } from 'node:crypto';
import { DlmError } from '@dlm/core';
import { acquireFunction } from './acquire-sql.js';
import { followersSchema } from './followers-sql.js';
import { queueSchema, queueStatements } from './queue-sql.js';
import { sharedSchema } from './shared-sql.js';

/**
 * The adapter's SQL. Every primitive is ONE statement (autocommit), so it is atomic on its own,
 * and the statements that change a lease send their NOTIFY from the same statement: PostgreSQL
 * delivers notifications at commit, so a listener never hears of a change that did not commit,
 * and never misses one that did (while it is listening). Exclusive grants and releases notify
 * only names with waiters or followers (followers-sql.ts). The hot statements are prepared once
 * per connection (`named`), so PostgreSQL parses and plans them once.
 *
 * Time is the database's: `clock_timestamp()` (the current time, also inside a long statement;
 * `now()` would be the transaction's start). Leases therefore do not depend on the dlm
 * servers' clocks agreeing with each other.
 *
 * The lease key's hash (`key_hash`, NULL for a lease granted without one) is stored in the row
 * that grants the lease and compared in the same statement as the token: release and extend
 * match it beside the token, and the same owner's re-acquire refreshes the lease only with it.
 * A request without a hash is a token-only (owner-only) match, as the backend contract says.
 */

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,39}$/;

/** A schema or table prefix the adapter can quote safely; INVALID_PARAMS otherwise. */
export function checkIdentifier(value: string, field: string, allowEmpty: boolean): string {
  if ((allowEmpty && value === '') || IDENTIFIER.test(value)) return value;
  throw new DlmError(
    'INVALID_PARAMS',
    `${field} must be lower-case letters, digits and _ (not starting with a digit, at most 40 characters), got ${JSON.stringify(value)}`,
    { field },
  );
}

/**
 * The schema's stamp: a one-row table holding a hash of the schema's statements, written by the
 * transaction that ran them. A backend that opens on a schema whose stamp is current runs no DDL:
 * `ALTER TABLE` takes an ACCESS EXCLUSIVE lock on a table in use until its transaction ends, so a
 * server starting beside busy ones would queue every request behind it, and deadlock some (a
 * request holding a row lock that needs another table: `deadlock detected`, a waiter's join lost).
 */
export interface SchemaStamp {
  /** The stamp of these statements. */
  hash: string;
  /** `$1`: the stamp table's quoted name; `present` is true when it exists. */
  present: string;
  table: string;
  /** The stamp, when there is one (run only when `present`). */
  read: string;
  /** `$1`: the new stamp. */
  write: string;
}

export interface Statements extends QueueStatements {
  /** The notification channel (an identifier, already quoted where SQL needs it). */
  channel: string;
  /** The advisory lock that serialises servers setting the schema up (first in its transaction). */
  schemaLock: string;
  /**
   * Run in one transaction at open, after `schemaLock`, when the stamp is not current
   * (`schemaStamp`); idempotent.
   */
  schema: string[];
  schemaStamp: SchemaStamp;
  /** A try-lock in either mode (acquire-sql.ts): `$5` shared, `$6` limit (1: exclusive). */
  acquire: string;
  release: string;
  /** Registers `$1` followed by the server whose LISTEN connection is `$2` (followers-sql.ts). */
  follow: string;
  unfollow: string;
  /** Followers whose server's LISTEN connection is gone, at most `$1`. */
  followersSweep: string;
  /** The name of a prepared statement of this backend's (its schema and prefix in it). */
  named(statement: string): string;
  extend: string;
  inspect: string;
  /** The name's lock-delay left, in ms (no row: none). */
  lockDelay: string;
  revoke: string;
  list: string;
  sweep: string;
  /** Shared holders' rows that ended more than `$2` ms ago, at most `$1`. */
  sharedSweep: string;
}

/** The statements of the cross-server fair queue (queue-sql.ts builds them). */
export interface QueueStatements {
  /** Either mode: take the free lock (nobody queued) or the caller's own again, else queue. */
  queueJoin: string;
  /** Either mode: take the lock when the rule grants it; else say what to wait for. */
  queueLook: string;
  queueLeave: string;
  /** Keeps the entries of a live server queued. */
  queueRenew: string;
  /** Bounded: removes entries whose server stopped renewing them. */
  queueSweep: string;
  /** The live entries of a name (`$1`), or those up to an id (`$2`, NULL: all): a place. */
  queueCount: string;
}

/** The names and SQL fragments the lease and queue statements share. */
export interface SqlParts {
  schema: string;
  prefix: string;
  table: string;
  /** Shared holders, one row each (shared-sql.ts). */
  holders: string;
  waiters: string;
  /** Names that dlm servers watch (followers-sql.ts). */
  followers: string;
  channel: string;
  /** The adapter's function `name`, qualified and quoted. */
  fn(name: string): string;
  /** `nextval` of the token sequence. */
  nextToken: string;
  /** The time left until `at` (a timestamptz expression), in whole ms (at least 1). */
  msUntil(at: string): string;
  /** When the lock-delay of the exclusive lease in `row` ends (its end plus `delay_ms`). */
  delayEnd(row: string): string;
  /** The whole ms until `at`, rounded down (a cap's time left is never overstated); NULL for NULL. */
  floorMs(at: string): string;
  /** The lease remaining on `row`, in whole ms (at least 1). */
  remaining(row: string): string;
  /** A `pg_notify` of one change, as a JSON object. */
  notify(type: string, row: string, ttl: string): string;
  /** The same from its parts: the name, token, owner and ms expressions. */
  announce(type: string, name: string, token: string, owner: string, ttl: string): string;
  /** Whether a change of the name `name` must be announced: it has waiters or followers. */
  heard(name: string): string;
  /**
   * Whether the queue entry `row` is live: its end is ahead, and the connection it was made on
   * (`pid`, the server's LISTEN connection) still exists. A pid reused by another connection
   * keeps a dead server's entry live until its end, never longer.
   */
  liveEntry(row: string): string;
}

export function sqlParts(schema: string, prefix: string): SqlParts {
  const table = `"${schema}"."${prefix}leases"`;
  const waiters = `"${schema}"."${prefix}waiters"`;
  const holders = `"${schema}"."${prefix}holders"`;
  const followers = `"${schema}"."${prefix}followers"`;
  const channel = `${prefix}events`;
  const nextToken = `nextval('${schema}.${prefix}tokens')`;
  const msUntil = (at: string) =>
    `greatest(1, ceil(extract(epoch from (${at} - clock_timestamp())) * 1000))::bigint`;
  const delayEnd = (row: string) =>
    `(${row}.expires_at + ${row}.delay_ms * interval '1 millisecond')`;
  // The message: one JSON object per change; names and owners are bounded by core's limits,
  // so it stays far below NOTIFY's 8000-byte payload limit.
  const announce = (type: string, name: string, token: string, owner: string, ttl: string) =>
    `pg_notify('${channel}', json_build_object('t', '${type}', 'n', ${name}, 'k', ${token}::text, 'o', ${owner}, 'ms', ${ttl})::text)`;
  const liveEntry = (row: string) =>
    `(${row}.expires_at > clock_timestamp() AND (${row}.pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_get_activity(${row}.pid))))`;
  return {
    schema,
    prefix,
    table,
    holders,
    waiters,
    followers,
    channel,
    fn: (name) => `"${schema}"."${prefix}${name}"`,
    nextToken,
    msUntil,
    delayEnd,
    floorMs: (at) => `floor(extract(epoch from (${at} - clock_timestamp())) * 1000)::bigint`,
    remaining: (row) => msUntil(`${row}.expires_at`),
    notify: (type, row, ttl) => announce(type, `${row}.name`, `${row}.token`, `${row}.owner`, ttl),
    announce,
    // Any entry, live or not, and any follower, live or not: an extra NOTIFY is harmless.
    heard: (name) =>
      `(EXISTS (SELECT 1 FROM ${waiters} w WHERE w.name = ${name}) OR EXISTS (SELECT 1 FROM ${followers} f WHERE f.name = ${name}))`,
    liveEntry,
  };
}

/**
 * The statements for one `schema` and `prefix`. Parameters are always `$n` placeholders; only
 * the checked identifiers are spliced in.
 */
export function statements(schema: string, prefix: string): Statements {
  const parts = sqlParts(schema, prefix);
  const { table, channel, remaining } = parts;
  // A request's key hash parameter matches the row's, or the request has none (token only).
  const keyMatches = (param: string) => `(${param}::text IS NULL OR key_hash = ${param}::text)`;
  // A shared group row's live holders, ordered by token (NULL for an exclusive lease).
  const holdersOf = (row: string) => `CASE WHEN ${row}.mode = 'shared' THEN (
      SELECT json_agg(json_build_array(x.owner, x.token::text, ${remaining('x')}) ORDER BY x.token)
      FROM ${parts.holders} x WHERE x.name = ${row}.name AND x.expires_at > clock_timestamp()) END`;
  const stampTable = `"${schema}"."${prefix}schema_stamp"`;
  const schemaStatements = [
    `CREATE SCHEMA IF NOT EXISTS "${schema}"`,
    // A sequence never goes back, across restarts too (its state is WAL-logged; values handed
    // out ahead are skipped after a crash, never repeated). One sequence serves every name:
    // each name's tokens then still strictly increase.
    `CREATE SEQUENCE IF NOT EXISTS "${schema}"."${prefix}tokens" AS bigint MINVALUE 1`,
    `CREATE TABLE IF NOT EXISTS ${table} (
      name text PRIMARY KEY,
      owner text NOT NULL,
      token bigint NOT NULL,
      expires_at timestamptz NOT NULL,
      key_hash text
    )`,
    // Tables made before lease keys existed gain the column (NULL: no key).
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS key_hash text`,
    // An exclusive lease's lock-delay (acquire-sql.ts); NULL: none.
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS delay_ms bigint`,
    // An exclusive lease's cap on holding (acquire-sql.ts); NULL: none.
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS cap_at timestamptz`,
    // The sweep looks rows up by their end.
    `CREATE INDEX IF NOT EXISTS "${prefix}leases_expires_at" ON ${table} (expires_at)`,
    ...queueSchema(parts),
    ...sharedSchema(parts),
    ...followersSchema(parts),
    acquireFunction(parts),
    `CREATE TABLE IF NOT EXISTS ${stampTable} (
      id int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
      stamp text NOT NULL
    )`,
  ];
  return {
    channel,
    schemaLock: `SELECT pg_advisory_xact_lock(hashtext('dlm schema ' || '${schema}.${prefix}'))`,
    schema: schemaStatements,
    schemaStamp: stampOf(stampTable, schemaStatements),
    // A fresh grant only while nobody is queued for the name, so a try-lock on any server never
    // jumps the cross-server queue; the holder's own re-acquire refreshes its lease whatever
    // waits. A refusal says by whose lease (the remaining ms of the holder that would let the
    // request in) or why (a mode or limit conflict), read under the name's row lock.
    acquire: `SELECT granted, token::text AS token, remaining_ms, conflict, conflict_limit, holders,
        delayed, granted_ms, hold_ms
      FROM ${parts.fn('acquire')}($1, $2, $3::bigint, $4::text, $5::boolean, $6::int, true, 0, $7::bigint, $8::bigint)`,
    // An exclusive or a shared holder's release (followers-sql.ts).
    release: `SELECT live, owner FROM ${parts.fn('release')}($1, $2::bigint, $3::text)`,
    follow: `SELECT ${parts.fn('follow')}($1, $2::int)`,
    unfollow: `DELETE FROM ${parts.followers} WHERE name = $1 AND pid = $2::int`,
    followersSweep: `DELETE FROM ${parts.followers} WHERE ctid IN (
        SELECT ctid FROM ${parts.followers} f
        WHERE NOT EXISTS (SELECT 1 FROM pg_stat_get_activity(f.pid))
        LIMIT $1::int FOR UPDATE SKIP LOCKED
      )`,
    named: (statement) => `dlm ${schema}.${prefix} ${statement}`,
    // An exclusive lease with a cap on holding is extended up to its cap only, and not at all
    // once there: `ttl_ms` says how long it now runs, `hold_ms` how long to its cap.
    extend: `WITH done AS (
        UPDATE ${table} SET expires_at = least(
            clock_timestamp() + $3::bigint * interval '1 millisecond', coalesce(cap_at, 'infinity'))
        WHERE name = $1 AND token = $2 AND ${keyMatches('$4')} AND expires_at > clock_timestamp()
          AND mode IS NULL AND (cap_at IS NULL OR cap_at > clock_timestamp())
        RETURNING owner, ${parts.floorMs('expires_at')} AS ttl_ms, ${parts.floorMs('cap_at')} AS hold_ms
      ), shared AS (
        SELECT s.owner FROM "${schema}"."${prefix}shared_change"($1, $2::bigint, $4::text, $3::bigint) s
        WHERE NOT EXISTS (SELECT 1 FROM done)
          AND EXISTS (SELECT 1 FROM ${table} l WHERE l.name = $1 AND l.mode = 'shared')
      )
      SELECT owner, false AS shared, ttl_ms, hold_ms FROM done
      UNION ALL SELECT owner, true, NULL, NULL FROM shared WHERE owner IS NOT NULL`,
    inspect: `SELECT l.owner, l.token::text AS token, ${remaining('l')} AS remaining_ms, l.mode,
        l.holder_limit, ${holdersOf('l')} AS holders
      FROM ${table} l WHERE l.name = $1 AND l.expires_at > clock_timestamp()`,
    lockDelay: `SELECT ${parts.msUntil(parts.delayEnd('l'))} AS ms FROM ${table} l
      WHERE l.name = $1 AND l.mode IS NULL AND l.delay_ms IS NOT NULL
        AND l.expires_at <= clock_timestamp() AND ${parts.delayEnd('l')} > clock_timestamp()`,
    // Ends every lease of the name (shared-sql.ts): an exclusive holder's row, or every shared
    // holder's (each announced) and their group row, under the name's row lock.
    revoke: `SELECT live FROM ${parts.fn('revoke')}($1)`,
    list: `SELECT l.name, l.owner, l.token::text AS token, ${remaining('l')} AS remaining_ms, l.mode,
        l.holder_limit, ${holdersOf('l')} AS holders
      FROM ${table} l
      WHERE starts_with(l.name, $1) AND l.expires_at > clock_timestamp()
      ORDER BY l.name`,
    // Bounded: at most $1 rows per run, only rows that ended more than $2 ms ago (a grant may be
    // taking the row over right now; the margin keeps the sweep out of its way, and SKIP LOCKED
    // out of any transaction's). Names locked again never get here: acquire overwrites them.
    sweep: `DELETE FROM ${table} WHERE ctid IN (
        SELECT ctid FROM ${table}
        WHERE expires_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
          AND (delay_ms IS NULL
            OR ${parts.delayEnd(table)} < clock_timestamp() - $2::bigint * interval '1 millisecond')
        LIMIT $1::int FOR UPDATE SKIP LOCKED
      )`,
    sharedSweep: `DELETE FROM ${parts.holders} WHERE ctid IN (
        SELECT ctid FROM ${parts.holders}
        WHERE expires_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
        LIMIT $1::int FOR UPDATE SKIP LOCKED
      )`,
    ...queueStatements(parts),
  };
}

/** The stamp of `schema`'s statements, kept in `table` (see {@link SchemaStamp}). */
function stampOf(table: string, schema: readonly string[]): SchemaStamp {
  return {
    hash: createHash('sha256').update(schema.join('\n;\n')).digest('hex'),
    present: 'SELECT to_regclass($1) IS NOT NULL AS present',
    table,
    read: `SELECT stamp FROM ${table} WHERE id = 1`,
    write: `INSERT INTO ${table} (id, stamp) VALUES (1, $1)
      ON CONFLICT (id) DO UPDATE SET stamp = EXCLUDED.stamp`,
  };
}
