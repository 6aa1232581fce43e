/**
 * Fencing in PostgreSQL: the row keeps the highest fencing token that wrote it, and every write
 * is one conditional statement that only applies when the writer's token is not older. The
 * comparison and the write are one atomic step: under READ COMMITTED a concurrent UPDATE of the
 * same row waits for the row lock, then re-checks its WHERE clause against the row as the first
 * one committed it. So a stale holder's write can never land after a newer holder's.
 */

/** The table: one row per protected resource, its data next to the highest token accepted. */
export const FENCED_TABLE_SQL = `
CREATE TABLE IF NOT EXISTS fenced_resource (
  key         text   PRIMARY KEY,
  value       text   NOT NULL,
  fence_token bigint NOT NULL CHECK (fence_token >= 0)
)`;

/**
 * The write: applies only when `$2` (the writer's token) is not older than the row's. An equal
 * token is accepted (one holder writing many times). No row updated = refused (or no such row).
 */
export const FENCED_UPDATE_SQL = `
UPDATE fenced_resource
   SET value = $3, fence_token = $2
 WHERE key = $1 AND fence_token <= $2`;

/**
 * The same rule for a row that may not exist yet: the first write inserts it; later ones go
 * through the conditional `DO UPDATE … WHERE`, one statement either way.
 */
export const FENCED_UPSERT_SQL = `
INSERT INTO fenced_resource AS r (key, value, fence_token)
VALUES ($1, $3, $2)
ON CONFLICT (key) DO UPDATE
   SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token
 WHERE r.fence_token <= EXCLUDED.fence_token`;

/** The part of `pg`'s `Client`/`Pool`/`PoolClient` the recipe uses. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null }>;
}

/**
 * Writes `value` under `key` if `token` is not older than the newest token that wrote it.
 * Returns false when it was refused: a newer lock holder has written since (or, for the plain
 * UPDATE, the row does not exist). Tokens go over as decimal strings: a `bigint` fencing token
 * can exceed what a JavaScript number holds exactly.
 *
 * @example
 * const lease = await client.acquire('invoice/42', { ttlMs: 10_000 });
 * if (!(await fencedWrite(pool, 'invoice/42', lease.token, json))) {
 *   // somebody holds the lock now and has written: our lease ended without us noticing
 * }
 */
export async function fencedWrite(
  db: Queryable,
  key: string,
  token: bigint,
  value: string,
  { upsert = true }: { upsert?: boolean } = {},
): Promise<boolean> {
  const result = await db.query(upsert ? FENCED_UPSERT_SQL : FENCED_UPDATE_SQL, [
    key,
    token.toString(),
    value,
  ]);
  return result.rowCount === 1;
}
