import pg from 'pg';
import { type Locker, peerTarget, type Target, WaitTimeout } from './locker.js';

/** PostgreSQL's "lock not available": `lock_timeout` ran out while waiting. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * PostgreSQL session-level advisory locks over `pg`, the database-native option: one
 * connection per simulated client, the name hashed to a 64-bit key (`hashtextextended`). A
 * try-lock is `pg_try_advisory_lock`; a wait is `pg_advisory_lock` with `lock_timeout` set to
 * the wait (the server queues the waiters, no polling), and release is `pg_advisory_unlock`.
 * Such a lock has no TTL and no fencing token: it lasts as long as its session, so `ttlMs` is
 * unused (the comparison the benchmark makes is the cost per acquire and release).
 */
export function pgAdvisoryTarget(url: string): Target {
  return peerTarget('peer-pg-advisory', 'pg_advisory_lock', async (): Promise<Locker> => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    // Errors after a query failed surface on the query; an idle break must not crash.
    client.on('error', () => {});
    let lockTimeout = -1;
    return {
      async acquire(name, { waitMs }) {
        if (waitMs === 0) {
          const result = await client.query(
            'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok',
            [name],
          );
          if (!(result.rows[0] as { ok: boolean }).ok) throw new WaitTimeout(name);
        } else {
          const timeout = Math.max(1, Math.round(waitMs));
          if (timeout !== lockTimeout) {
            await client.query(`SET lock_timeout = ${timeout}`);
            lockTimeout = timeout;
          }
          try {
            await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [name]);
          } catch (error) {
            if ((error as { code?: string }).code === LOCK_NOT_AVAILABLE) {
              throw new WaitTimeout(name);
            }
            throw error;
          }
        }
        return {
          async release() {
            await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [name]);
          },
        };
      },
      async close() {
        await client.end();
      },
    };
  });
}
