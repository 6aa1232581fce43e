import { type Clock, DlmError, toUnavailable } from '@dlm/core';
import pg from 'pg';

/**
 * Bounds every call to PostgreSQL in time and turns whatever went wrong into UNAVAILABLE,
 * marked `indeterminate` when a write may have committed without our hearing of it.
 */

/**
 * An error reply from the server (it has a SQLSTATE): the statement failed, and in autocommit
 * its transaction rolled back, so nothing was written. Anything else once the statement was
 * sent (the connection dropped, our read timed out) leaves a write's outcome unknown.
 */
function isServerError(error: unknown): boolean {
  return error instanceof pg.DatabaseError;
}

/**
 * Runs `work` on a pooled connection within `timeoutMs` (connecting included). On a time-out or
 * a dropped connection the connection is destroyed, not returned to the pool: it may still be
 * busy with the abandoned statement.
 */
export type Caller = <T>(
  what: string,
  write: boolean,
  work: (client: pg.PoolClient) => Promise<T>,
) => Promise<T>;

export function createCaller(options: {
  pool: pg.Pool;
  clock: Clock;
  timeoutMs: number;
  /** Awaited inside the bound before the first statement (the schema, once). */
  before: () => Promise<void>;
}): Caller {
  const { pool, clock, timeoutMs, before } = options;
  return <T>(what: string, write: boolean, work: (client: pg.PoolClient) => Promise<T>) =>
    new Promise<T>((resolve, reject) => {
      let settled = false;
      let sent = false;
      let client: pg.PoolClient | undefined;
      const giveBack = (destroy: boolean) => {
        const held = client;
        client = undefined;
        held?.release(destroy);
      };
      const timer = clock.setTimer(() => {
        if (settled) return;
        settled = true;
        giveBack(true);
        reject(
          new DlmError(
            'UNAVAILABLE',
            `${what}: PostgreSQL did not answer within ${timeoutMs} ms`,
            write && sent ? { indeterminate: true } : {},
          ),
        );
      }, timeoutMs);
      void (async () => {
        await before();
        const connected = await pool.connect();
        if (settled) {
          connected.release();
          return undefined as T;
        }
        client = connected;
        sent = true;
        return work(connected);
      })().then(
        (value) => {
          timer.cancel();
          giveBack(false);
          if (settled) return;
          settled = true;
          resolve(value);
        },
        (error: unknown) => {
          timer.cancel();
          giveBack(!isServerError(error));
          if (settled) return;
          settled = true;
          const indeterminate = write && sent && !isServerError(error);
          reject(toUnavailable(error, what, indeterminate, 'PostgreSQL'));
        },
      );
    });
}

/**
 * A query with our read time-out, so a stalled server cannot hold a connection forever. With a
 * `name`, a prepared statement: parsed and planned once per connection (the name must stand for
 * this text alone on every connection of the pool: `Statements.named` puts the schema and
 * prefix in it).
 */
export function query(
  client: pg.ClientBase,
  text: string,
  values: unknown[],
  timeoutMs: number,
  name?: string,
): Promise<pg.QueryResult> {
  return client.query({ text, values, query_timeout: timeoutMs, name } as pg.QueryConfig);
}
