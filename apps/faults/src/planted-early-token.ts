import type { AcquireRequest, AcquireResult, LockBackend } from '@dlm/core';
import pg from 'pg';

/**
 * The linearizability segments' negative control: a PostgreSQL backend whose exclusive try-lock
 * takes its token BEFORE it waits for the name's row, the bug adapter-postgres once had (issue
 * 28). Everything else is the real adapter's (release, get, events), on the same tables, so the
 * lock segment's workload runs as it does on the real backend. The statement also pauses for a
 * random moment between its token and its write, so the race that production hit now and then
 * comes often enough for a short segment: the checker must then flag a lower token granted
 * after a higher one. Never used outside the harness.
 */

/** The planted grant: `nextval` first, a pause, then the old `INSERT … ON CONFLICT` grant. */
const PLANTED_FUNCTION = `CREATE OR REPLACE FUNCTION "public"."dlm_planted_acquire"(
    p_name text, p_owner text, p_ttl bigint, p_key text, p_pause_ms float8)
  RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
  DECLARE
    tok bigint := nextval('public.dlm_tokens');
    got bigint;
  BEGIN
    PERFORM pg_sleep(random() * p_pause_ms / 1000);
    INSERT INTO "public"."dlm_leases" AS l (name, owner, token, expires_at, key_hash)
      VALUES (p_name, p_owner, tok, clock_timestamp() + p_ttl * interval '1 millisecond', p_key)
      ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token,
        expires_at = EXCLUDED.expires_at, key_hash = EXCLUDED.key_hash, mode = NULL,
        holder_limit = NULL
      WHERE l.expires_at <= clock_timestamp()
      RETURNING l.token INTO got;
    IF got IS NOT NULL THEN
      PERFORM pg_notify('dlm_events', json_build_object('t', 'acquired', 'n', p_name,
        'k', got::text, 'o', p_owner, 'ms', p_ttl)::text);
    END IF;
    RETURN got;
  END
  $fn$`;

/**
 * `backend` (the real PostgreSQL adapter on `url`, default schema and prefix, already open) with
 * its exclusive try-lock replaced by the planted one. Shared requests and waits are the real
 * adapter's: the lock segment makes neither.
 */
export async function plantEarlyToken(
  backend: LockBackend,
  url: string,
  pauseMs: number,
): Promise<LockBackend> {
  const pool = new pg.Pool({ connectionString: url, max: 10, application_name: 'dlm-planted' });
  pool.on('error', () => {});
  await pool.query(PLANTED_FUNCTION);
  async function tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    if (request.mode === 'shared') return backend.tryAcquire(request);
    const { name, owner, ttlMs, keyHash } = request;
    const result = await pool.query(
      'SELECT "public"."dlm_planted_acquire"($1, $2, $3, $4, $5)::text AS token',
      [name, owner, ttlMs, keyHash ?? null, pauseMs],
    );
    const token = (result.rows[0] as { token: string | null }).token;
    if (token !== null)
      return { granted: true, grant: { name, owner, token: BigInt(token), ttlMs } };
    const holder = await backend.inspect(name);
    return holder ? { granted: false, ttlRemainingMs: holder.ttlRemainingMs } : { granted: false };
  }
  return {
    ...backend,
    kind: backend.kind,
    capabilities: backend.capabilities,
    tryAcquire,
    async close() {
      await backend.close();
      await pool.end();
    },
  };
}
