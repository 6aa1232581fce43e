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
 * row (`FOR UPDATE`, creating an ended placeholder when the name has none), and every later
 * statement of a VOLATILE function takes a new snapshot, so the count and the decision are made
 * on committed state under that lock: two servers racing for the last permit cannot both win.
 * Tokens come from the one token sequence, so they increase across modes.
 *
 * `acquire(name, owner, ttl ms, key hash, shared, limit, gate, ahead)`: `gate` refuses a fresh
 * grant while a live queue entry waits for the name (a try-lock never jumps the queue); `ahead`
 * counts the shared queue entries ahead of the caller against the limit (a queue look). Returns
 * one row: granted, token, remaining_ms (of the holder whose end would let the request in),
 * conflict ('mode' | 'limit' | NULL), conflict_limit, holders (after the step).
 */
export function sharedSchema(parts: SqlParts): string[] {
  const { schema, prefix, table, waiters, nextToken, channel } = parts;
  const holders = `"${schema}"."${prefix}holders"`;
  const fn = (name: string) => `"${schema}"."${prefix}${name}"`;
  const live = (row: string) =>
    `(${row}.expires_at > clock_timestamp() AND (${row}.pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_get_activity(${row}.pid))))`;
  const ms = (at: string) =>
    `greatest(1, ceil(extract(epoch from (${at} - clock_timestamp())) * 1000))::bigint`;
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
    `CREATE OR REPLACE FUNCTION ${fn('shared_acquire')}(
        p_name text, p_owner text, p_ttl bigint, p_key text, p_shared boolean, p_limit int,
        p_gate boolean, p_ahead int,
        OUT granted boolean, OUT token bigint, OUT remaining_ms bigint, OUT conflict text,
        OUT conflict_limit int, OUT holders int)
      LANGUAGE plpgsql VOLATILE AS $fn$
      #variable_conflict use_column
      DECLARE
        tok bigint;
        r record;
        mine record;
        n int;
        ends timestamptz;
      BEGIN
        granted := false;
        -- The name's row, locked; an ended placeholder first when it has none (again if a
        -- release or the sweep deleted it in between).
        LOOP
          SELECT * INTO r FROM ${table} WHERE name = p_name FOR UPDATE;
          EXIT WHEN FOUND;
          INSERT INTO ${table} (name, owner, token, expires_at) VALUES (p_name, '', 0, 'epoch')
            ON CONFLICT (name) DO NOTHING;
        END LOOP;
        IF r.expires_at > clock_timestamp() AND r.mode IS NULL THEN
          -- An exclusive holder.
          IF r.owner = p_owner AND (p_key IS NULL OR r.key_hash IS NOT DISTINCT FROM p_key)
             AND p_shared THEN
            conflict := 'mode';
          END IF;
          remaining_ms := ${ms('r.expires_at')};
          holders := 1;
          RETURN;
        END IF;
        IF r.mode IS DISTINCT FROM 'shared' OR r.expires_at <= clock_timestamp() THEN
          -- Free: whatever shared rows are left are residue.
          DELETE FROM ${holders} h WHERE h.name = p_name;
          holders := 0;
          IF NOT p_shared THEN RETURN; END IF;
          IF p_gate AND EXISTS (SELECT 1 FROM ${waiters} w WHERE w.name = p_name AND ${live('w')}) THEN
            RETURN;
          END IF;
          IF p_ahead >= p_limit THEN RETURN; END IF;
          tok := ${nextToken};
          token := tok;
          ends := clock_timestamp() + p_ttl * interval '1 millisecond';
          UPDATE ${table} SET owner = '', token = tok, expires_at = ends, key_hash = NULL,
              mode = 'shared', holder_limit = p_limit
            WHERE name = p_name;
          INSERT INTO ${holders} (name, token, owner, expires_at, key_hash)
            VALUES (p_name, tok, p_owner, ends, p_key);
          granted := true;
          holders := 1;
          ${notify('acquired', 'tok', 'p_owner', 'p_ttl', '1')};
          RETURN;
        END IF;
        -- Shared holders hold it.
        DELETE FROM ${holders} h WHERE h.name = p_name AND h.expires_at <= clock_timestamp();
        SELECT count(*)::int INTO n FROM ${holders} h WHERE h.name = p_name;
        holders := n;
        IF n = 0 THEN
          -- A live group row without a live holder was not written by these functions (an
          -- adapter from before shared modes took an ended group row over): held, exclusively.
          remaining_ms := ${ms('r.expires_at')};
          RETURN;
        END IF;
        SELECT * INTO mine FROM ${holders} h
          WHERE h.name = p_name AND h.owner = p_owner
            AND (p_key IS NULL OR h.key_hash IS NOT DISTINCT FROM p_key)
          ORDER BY h.token DESC LIMIT 1;
        IF mine.token IS NOT NULL AND NOT p_shared THEN
          conflict := 'mode';
          remaining_ms := ${ms('r.expires_at')};
          RETURN;
        END IF;
        IF NOT p_shared THEN
          remaining_ms := ${ms('r.expires_at')};
          RETURN;
        END IF;
        IF r.holder_limit <> p_limit THEN
          conflict := 'limit';
          conflict_limit := r.holder_limit;
          RETURN;
        END IF;
        ends := clock_timestamp() + p_ttl * interval '1 millisecond';
        IF mine.token IS NOT NULL THEN
          UPDATE ${holders} h SET expires_at = ends WHERE h.name = p_name AND h.token = mine.token;
          -- The group's end is its latest holder's (a refresh may shorten this one's).
          UPDATE ${table} l SET expires_at = (SELECT max(h.expires_at) FROM ${holders} h
              WHERE h.name = p_name)
            WHERE l.name = p_name;
          tok := mine.token;
          token := tok;
          granted := true;
          ${notify('acquired', 'tok', 'p_owner', 'p_ttl', 'n')};
          RETURN;
        END IF;
        IF p_ahead >= p_limit - n THEN
          SELECT ${ms('min(h.expires_at)')} INTO remaining_ms FROM ${holders} h WHERE h.name = p_name;
          RETURN;
        END IF;
        IF p_gate AND EXISTS (SELECT 1 FROM ${waiters} w WHERE w.name = p_name AND ${live('w')}) THEN
          SELECT ${ms('min(h.expires_at)')} INTO remaining_ms FROM ${holders} h WHERE h.name = p_name;
          RETURN;
        END IF;
        tok := ${nextToken};
          token := tok;
        INSERT INTO ${holders} (name, token, owner, expires_at, key_hash)
          VALUES (p_name, tok, p_owner, ends, p_key);
        UPDATE ${table} l SET token = tok, expires_at = greatest(l.expires_at, ends)
          WHERE l.name = p_name;
        granted := true;
        holders := n + 1;
        ${notify('acquired', 'tok', 'p_owner', 'p_ttl', 'n + 1')};
      END
      $fn$`,
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
        DELETE FROM ${table} l WHERE l.name = p_name;
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
