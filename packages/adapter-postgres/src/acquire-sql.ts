import type { SqlParts } from './sql.js';

/**
 * The one grant of the adapter, for both modes: a PL/pgSQL function that every statement that
 * may grant calls (try-lock, the queue's join and look, shared or exclusive, and so each lock of
 * an all-or-nothing set).
 *
 * Why a function and not one `INSERT … ON CONFLICT` (fencing, SPEC.md: every grant's token is
 * above every earlier grant's of the name): a token must be taken while the name is locked, and
 * written before that lock is let go. An `INSERT … SELECT nextval(…) … ON CONFLICT` takes its
 * token first and only then waits for the name's row (or a concurrent insert of it): when the
 * transaction it waited for granted the name and released it, the row is gone, and the waiting
 * statement inserts its older token after the newer grant (seen in production-like runs, and
 * reproduced step by step in test/token-order.test.ts). Here the first statement locks the name's
 * row (`FOR UPDATE`; when the name has none, an ended placeholder inserted by this call is as
 * good as locked, since a concurrent insert of the name waits for this transaction and a reader
 * does not see it; a release or the sweep may delete a row in between, hence the loop), and
 * only then is `nextval` taken: every grant
 * of the name before ours committed before we held the lock, so its token came from an earlier
 * `nextval`. (The sequence hands out values in call order across sessions because its CACHE is 1,
 * the default: never raise it.) Every later statement of a VOLATILE function takes a new
 * snapshot, so the decision is made on committed state under that lock: two servers racing for a
 * name, or for a semaphore's last permit, cannot both win.
 *
 * `acquire(name, owner, ttl ms, key hash, shared, limit, gate, ahead, delay ms)`: `limit` is 1 for an
 * exclusive request; `gate` refuses a fresh grant while a live queue entry waits for the name (a
 * try-lock never jumps the queue); `ahead` counts the queue entries ahead of the caller that
 * would be granted before it, against the limit (a queue look). The holder's own re-acquire (the
 * same owner, and the lease's key hash when one is given) refreshes its lease whatever waits.
 * Returns one row: granted, token, remaining_ms (of the holder whose end would let the request
 * in), conflict ('mode' | 'limit' | NULL), conflict_limit, holders (after the step), delayed.
 * Grants `pg_notify` from inside (delivered at commit) when the name has waiters or followers.
 *
 * Lock-delay (core's rule 5): an exclusive grant stores its `delay ms` (NULL: none) in the
 * name's row, so the row says when the delay ends, `expires_at + delay_ms`, with no write at
 * the lease's expiry. A release deletes the row (no delay), a revocation ends it now and keeps
 * it (shared-sql.ts), an extend moves `expires_at` and so the delay, and the sweep keeps a row
 * until its delay has passed. A free name in its delay grants nobody: `delayed`, with
 * `remaining_ms` the delay left (after the gate and the entries ahead, before a grant).
 *
 * A cap on holding (`p_hold` ms, 0: none; exclusive only): a fresh grant stores `cap_at`, now
 * plus the cap, in the name's row; the holder's refresh (and the extend statement, sql.ts) sets
 * `expires_at` no later than it, and says so in `granted_ms` (the lease set, in ms) and `hold_ms`
 * (the ms left to the cap; NULL: none).
 */
export function acquireFunction(parts: SqlParts): string {
  const { table, holders, nextToken, channel, liveEntry, msUntil, delayEnd, floorMs } = parts;
  // Only names with waiters or followers hear of a grant (followers-sql.ts); the caller's own
  // server hears of it from this row.
  const told = (token: string, owner: string, shared: string) =>
    `IF ${parts.heard('p_name')} THEN
              PERFORM pg_notify('${channel}', json_build_object('t', 'acquired', 'n', p_name, 'k', ${token}::text, 'o', ${owner}, 'ms', p_ttl${shared})::text);
            END IF`;
  const toldShared = (token: string, count: string) =>
    told(token, 'p_owner', `, 'm', 'shared', 'h', ${count}`);
  const queued = `EXISTS (SELECT 1 FROM ${parts.waiters} w WHERE w.name = p_name AND ${liveEntry('w')})`;
  return `CREATE OR REPLACE FUNCTION ${parts.fn('acquire')}(
        p_name text, p_owner text, p_ttl bigint, p_key text, p_shared boolean, p_limit int,
        p_gate boolean, p_ahead int, p_delay bigint, p_hold bigint,
        OUT granted boolean, OUT token bigint, OUT remaining_ms bigint, OUT conflict text,
        OUT conflict_limit int, OUT holders int, OUT delayed boolean, OUT granted_ms bigint,
        OUT hold_ms bigint)
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
        delayed := false;
        -- The name's row, locked; or an ended placeholder of our own when it has none (again if
        -- a release or the sweep deleted it in between). Nothing before this takes a token.
        LOOP
          SELECT * INTO r FROM ${table} WHERE name = p_name FOR UPDATE;
          EXIT WHEN FOUND;
          INSERT INTO ${table} (name, owner, token, expires_at) VALUES (p_name, '', 0, 'epoch')
            ON CONFLICT (name) DO NOTHING RETURNING * INTO r;
          EXIT WHEN FOUND;
        END LOOP;
        ends := clock_timestamp() + p_ttl * interval '1 millisecond';
        IF r.expires_at > clock_timestamp() AND r.mode IS NULL THEN
          -- An exclusive holder: the caller's own lease is refreshed (same token), or refused.
          IF r.owner = p_owner AND (p_key IS NULL OR r.key_hash IS NOT DISTINCT FROM p_key) THEN
            IF p_shared THEN
              conflict := 'mode';
            ELSE
              -- The first grant's cap on holding holds: refreshed up to it only.
              ends := least(ends, coalesce(r.cap_at, ends));
              UPDATE ${table} SET expires_at = ends, delay_ms = nullif(p_delay, 0)
                WHERE name = p_name;
              IF r.cap_at IS NOT NULL THEN
                granted_ms := ${floorMs('ends')};
                hold_ms := ${floorMs('r.cap_at')};
              END IF;
              token := r.token;
              granted := true;
              holders := 1;
              ${told('r.token', 'p_owner', '')};
              RETURN;
            END IF;
          END IF;
          remaining_ms := ${msUntil('r.expires_at')};
          holders := 1;
          RETURN;
        END IF;
        IF r.mode IS DISTINCT FROM 'shared' OR r.expires_at <= clock_timestamp() THEN
          -- Free: whatever shared rows are left are residue.
          DELETE FROM ${holders} h WHERE h.name = p_name;
          holders := 0;
          IF p_gate AND ${queued} THEN RETURN; END IF;
          IF p_ahead >= p_limit THEN RETURN; END IF;
          IF r.mode IS NULL AND r.delay_ms IS NOT NULL AND ${delayEnd('r')} > clock_timestamp() THEN
            remaining_ms := ${msUntil(delayEnd('r'))};
            delayed := true;
            RETURN;
          END IF;
          tok := ${nextToken};
          token := tok;
          granted := true;
          holders := 1;
          IF NOT p_shared THEN
            UPDATE ${table} SET owner = p_owner, token = tok, expires_at = ends, key_hash = p_key,
                mode = NULL, holder_limit = NULL, delay_ms = nullif(p_delay, 0),
                cap_at = clock_timestamp() + nullif(p_hold, 0) * interval '1 millisecond'
              WHERE name = p_name;
            ${told('tok', 'p_owner', '')};
            RETURN;
          END IF;
          UPDATE ${table} SET owner = '', token = tok, expires_at = ends, key_hash = NULL,
              mode = 'shared', holder_limit = p_limit, delay_ms = NULL, cap_at = NULL
            WHERE name = p_name;
          INSERT INTO ${holders} (name, token, owner, expires_at, key_hash)
            VALUES (p_name, tok, p_owner, ends, p_key);
          ${toldShared('tok', '1')};
          RETURN;
        END IF;
        -- Shared holders hold it.
        DELETE FROM ${holders} h WHERE h.name = p_name AND h.expires_at <= clock_timestamp();
        SELECT count(*)::int INTO n FROM ${holders} h WHERE h.name = p_name;
        holders := n;
        IF n = 0 THEN
          -- A live group row without a live holder was not written by these functions (an
          -- adapter from before shared modes took an ended group row over): held, exclusively.
          remaining_ms := ${msUntil('r.expires_at')};
          RETURN;
        END IF;
        SELECT * INTO mine FROM ${holders} h
          WHERE h.name = p_name AND h.owner = p_owner
            AND (p_key IS NULL OR h.key_hash IS NOT DISTINCT FROM p_key)
          ORDER BY h.token DESC LIMIT 1;
        IF NOT p_shared THEN
          -- An exclusive request: refused; by its own shared lease, as a mode conflict.
          IF mine.token IS NOT NULL THEN conflict := 'mode'; END IF;
          remaining_ms := ${msUntil('r.expires_at')};
          RETURN;
        END IF;
        IF r.holder_limit <> p_limit THEN
          conflict := 'limit';
          conflict_limit := r.holder_limit;
          RETURN;
        END IF;
        IF mine.token IS NOT NULL THEN
          UPDATE ${holders} h SET expires_at = ends WHERE h.name = p_name AND h.token = mine.token;
          -- The group's end is its latest holder's (a refresh may shorten this one's).
          UPDATE ${table} l SET expires_at = (SELECT max(h.expires_at) FROM ${holders} h
              WHERE h.name = p_name)
            WHERE l.name = p_name;
          token := mine.token;
          granted := true;
          ${toldShared('mine.token', 'n')};
          RETURN;
        END IF;
        IF p_ahead >= p_limit - n OR (p_gate AND ${queued}) THEN
          SELECT ${msUntil('min(h.expires_at)')} INTO remaining_ms FROM ${holders} h
            WHERE h.name = p_name;
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
        ${toldShared('tok', 'n + 1')};
      END
      $fn$`;
}
