import type { SqlParts } from './sql.js';

/**
 * Who hears a change. A NOTIFY is not free: PostgreSQL serialises every committing transaction
 * that notifies (one lock for the database's notification queue, held through the commit), and
 * every LISTENing dlm server reads every message. So a grant or a release of an exclusive lease
 * announces itself only when someone needs it: a live-or-not queue entry of the name (a waiter
 * on any dlm server), or a follower, a row `(name, pid)` that a dlm server writes while it has
 * watchers on the name (`pid`: its LISTEN connection, so that a dead server's rows can be
 * swept). The server that made the change hears of it from its own reply, without a NOTIFY.
 * Shared holders' changes, revocations and release requests still always announce themselves.
 *
 * Why nothing is missed: a follower is written under the name's row lock (`FOR SHARE`, after an
 * ended placeholder row when the name has none, as a grant does), and the grant and release
 * functions look for waiters and followers in a statement after they locked that row (a
 * VOLATILE function's statements each take a new snapshot). Either the change locked the row
 * first, and committed before the follower was written (the server's `inspect` after that sees
 * it), or the follower committed first, and the change sees it and announces itself.
 */
export function followersSchema(parts: SqlParts): string[] {
  const { table, followers, fn } = parts;
  return [
    `CREATE TABLE IF NOT EXISTS ${followers} (
        name text NOT NULL,
        pid int NOT NULL,
        PRIMARY KEY (name, pid)
      )`,
    `CREATE OR REPLACE FUNCTION ${fn('follow')}(p_name text, p_pid int) RETURNS void
      LANGUAGE plpgsql VOLATILE AS $fn$
      BEGIN
        LOOP
          PERFORM 1 FROM ${table} l WHERE l.name = p_name FOR SHARE;
          EXIT WHEN FOUND;
          INSERT INTO ${table} (name, owner, token, expires_at) VALUES (p_name, '', 0, 'epoch')
            ON CONFLICT (name) DO NOTHING;
        END LOOP;
        INSERT INTO ${followers} (name, pid) VALUES (p_name, p_pid) ON CONFLICT DO NOTHING;
      END
      $fn$`,
    // An exclusive holder's release, by token (and key hash): deletes the row whatever its state
    // (an ended lease's row is residue) and reports a release only when the lease still ran,
    // announced only to waiters and followers. A shared holder's release (the name's row is
    // their group row, never deleted here) is shared_change's.
    `CREATE OR REPLACE FUNCTION ${fn('release')}(
        p_name text, p_token bigint, p_key text, OUT live boolean, OUT owner text)
      LANGUAGE plpgsql VOLATILE AS $fn$
      #variable_conflict use_column
      DECLARE
        gone record;
      BEGIN
        DELETE FROM ${table} l
          WHERE l.name = p_name AND l.token = p_token AND (p_key IS NULL OR l.key_hash = p_key)
            AND l.mode IS NULL
          RETURNING l.owner, l.expires_at > clock_timestamp() AS alive INTO gone;
        IF FOUND THEN
          live := gone.alive;
          owner := gone.owner;
          IF gone.alive AND ${parts.heard('p_name')} THEN
            PERFORM ${parts.announce('released', 'p_name', 'p_token', 'gone.owner', '0')};
          END IF;
          RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM ${table} l WHERE l.name = p_name AND l.mode = 'shared') THEN
          SELECT s.owner INTO owner FROM ${fn('shared_change')}(p_name, p_token, p_key, NULL) s;
          live := owner IS NOT NULL;
        END IF;
      END
      $fn$`,
  ];
}
