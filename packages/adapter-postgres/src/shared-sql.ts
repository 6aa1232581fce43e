import type { SqlParts } from './sql.js';

/**
 * Shared holders (read locks, semaphores). A name's row in the leases table stays the one place
 * every step locks: while shared holders hold the name, it is their group row — `mode`
 * 'shared', `holder_limit` their limit, `owner` '' (no real owner is empty, so the exclusive
 * statements never take it for their own), `token` the highest holder's and `expires_at` the
 * latest holder's end. The exclusive statements therefore see a live lease there and refuse, as
 * they would for an exclusive holder, without reading anything else (their round trips stay
 * one). Each shared holder is a row of the holders table (name, token), with its own owner, key
 * hash and end.
 *
 * The shared steps are PL/pgSQL functions, one call each: the first statement locks the name's
 * row (`FOR UPDATE`), and every later statement of a VOLATILE function takes a new snapshot, so
 * the count and the decision are made on committed state under that lock. A shared grant is the
 * adapter's one grant function (acquire-sql.ts), with its mode as a parameter; here are the
 * holders' table, a shared holder's release and extend, and revocation.
 */
export function sharedSchema(parts: SqlParts): string[] {
  const { prefix, table, waiters, holders, fn, channel } = parts;
  const notify = (type: string, token: string, owner: string, ttl: string, count: string) =>
    `PERFORM pg_notify('${channel}', json_build_object('t', '${type}', 'n', p_name, 'k', ${token}::text, 'o', ${owner}, 'ms', ${ttl}, 'm', 'shared', 'h', ${count})::text)`;
  return [
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS mode text`,
    `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS holder_limit int`,
    `ALTER TABLE ${waiters} ADD COLUMN IF NOT EXISTS mode text`,
    `ALTER TABLE ${waiters} ADD COLUMN IF NOT EXISTS holder_limit int`,
    `CREATE TABLE IF NOT EXISTS ${holders} (
        name text NOT NULL,
        token bigint NOT NULL,
        owner text NOT NULL,
        expires_at timestamptz NOT NULL,
        key_hash text,
        PRIMARY KEY (name, token)
      )`,
    `CREATE INDEX IF NOT EXISTS "${prefix}holders_expires_at" ON ${holders} (expires_at)`,
    // Release (p_ttl NULL) or extend one shared holder by token and key hash; the group row
    // follows (its end the latest remaining, or ended when none is left). Returns the holder's
    // owner, or no owner when the token is not a live shared holder's.
    `CREATE OR REPLACE FUNCTION ${fn('shared_change')}(
        p_name text, p_token bigint, p_key text, p_ttl bigint,
        OUT owner text, OUT holders int)
      LANGUAGE plpgsql VOLATILE AS $fn$
      #variable_conflict use_column
      DECLARE
        r record;
        h record;
        last_end timestamptz;
        top bigint;
      BEGIN
        SELECT * INTO r FROM ${table} l WHERE l.name = p_name FOR UPDATE;
        IF r.name IS NULL OR r.mode IS DISTINCT FROM 'shared' OR r.expires_at <= clock_timestamp() THEN
          RETURN;
        END IF;
        SELECT * INTO h FROM ${holders} x
          WHERE x.name = p_name AND x.token = p_token AND (p_key IS NULL OR x.key_hash = p_key)
            AND x.expires_at > clock_timestamp();
        IF h.token IS NULL THEN RETURN; END IF;
        owner := h.owner;
        IF p_ttl IS NULL THEN
          DELETE FROM ${holders} x WHERE x.name = p_name AND x.token = p_token;
        ELSE
          UPDATE ${holders} x SET expires_at = clock_timestamp() + p_ttl * interval '1 millisecond'
            WHERE x.name = p_name AND x.token = p_token;
        END IF;
        SELECT max(x.expires_at), max(x.token), count(*)::int INTO last_end, top, holders
          FROM ${holders} x WHERE x.name = p_name AND x.expires_at > clock_timestamp();
        IF holders = 0 THEN
          DELETE FROM ${table} l WHERE l.name = p_name;
          DELETE FROM ${holders} x WHERE x.name = p_name;
        ELSE
          UPDATE ${table} l SET expires_at = last_end, token = top WHERE l.name = p_name;
        END IF;
        IF p_ttl IS NULL THEN
          ${notify('released', 'p_token', 'h.owner', '0', 'holders')};
        END IF;
      END
      $fn$`,
    // Ends every lease of the name under its row lock (so no shared grant slips in between):
    // an exclusive holder's, or every shared holder's, each announced. Returns one row per live
    // lease ended.
    `CREATE OR REPLACE FUNCTION ${fn('revoke')}(p_name text)
      RETURNS TABLE (live boolean)
      LANGUAGE plpgsql VOLATILE AS $fn$
      #variable_conflict use_column
      DECLARE
        r record;
        h record;
      BEGIN
        SELECT * INTO r FROM ${table} l WHERE l.name = p_name FOR UPDATE;
        FOR h IN DELETE FROM ${holders} x WHERE x.name = p_name
            RETURNING x.token, x.owner, x.expires_at > clock_timestamp() AS alive LOOP
          IF h.alive AND r.mode = 'shared' THEN
            PERFORM pg_notify('${channel}', json_build_object('t', 'revoked', 'n', p_name,
              'k', h.token::text, 'o', h.owner, 'ms', 0)::text);
            live := true;
            RETURN NEXT;
          END IF;
        END LOOP;
        IF r.mode IS NULL AND r.delay_ms IS NOT NULL AND r.expires_at > clock_timestamp() THEN
          -- A revocation starts the lease's lock-delay now: the row stays, ended, until it passes.
          UPDATE ${table} l SET expires_at = clock_timestamp() WHERE l.name = p_name;
        ELSE
          DELETE FROM ${table} l WHERE l.name = p_name;
        END IF;
        IF r.name IS NOT NULL AND r.mode IS NULL AND r.expires_at > clock_timestamp() THEN
          PERFORM pg_notify('${channel}', json_build_object('t', 'revoked', 'n', p_name,
            'k', r.token::text, 'o', r.owner, 'ms', 0)::text);
          live := true;
          RETURN NEXT;
        END IF;
      END
      $fn$`,
  ];
}
