import { useService } from '@dlm/conformance';
import type { LockEvent } from '@dlm/core';
import { type PostgresService, startPostgres } from '@dlm/test-services';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import {
  type PostgresBackend,
  type PostgresBackendOptions,
  postgresBackend,
} from '../src/index.js';

/** PostgreSQL, an admin client of the test's own, and the backends a scope opens. */
export interface PostgresScope {
  postgres(): PostgresService;
  /** A client to look at (and meddle with) the tables, apart from every backend under test. */
  admin(): pg.Client;
  /** A new admin client, for a test that stopped the server under the last one. */
  reconnectAdmin(): Promise<void>;
  /**
   * A ready backend on the scope's table prefix (`options` win; with a `pool`, on it), closed
   * after the scope's tests.
   */
  open(options?: PostgresBackendOptions): Promise<PostgresBackend>;
}

/**
 * Starts PostgreSQL and connects an admin client before the enclosing scope's tests (file or
 * `describe`); after them closes the backends `open` made, then the admin client, then the server.
 */
export function usePostgres(tablePrefix: string): PostgresScope {
  const postgres = useService(() => startPostgres());
  let admin: pg.Client | undefined;
  const reconnectAdmin = async () => {
    admin = new pg.Client({ connectionString: postgres().url });
    await admin.connect();
  };
  beforeAll(reconnectAdmin);
  const opened: PostgresBackend[] = [];
  // Registered after the server's, so it runs before it (after-hooks run in reverse order).
  afterAll(async () => {
    for (const backend of opened) await backend.close().catch(() => {});
    await admin?.end().catch(() => {});
  });
  return {
    postgres,
    admin: () => {
      if (!admin) throw new Error('the admin client connects in beforeAll');
      return admin;
    },
    reconnectAdmin,
    open: async (options = {}) => {
      // A pool of the test's own stands for the URL.
      const url = options.pool ? {} : { url: postgres().url };
      const backend = postgresBackend({ ...url, tablePrefix, ...options });
      opened.push(backend);
      await backend.ready();
      return backend;
    },
  };
}

/**
 * `backend`'s events of `name`, followed as core follows a watched name (`followChanges`: the
 * grants and releases of other servers are announced to it); every change after the returned
 * promise resolves reaches `listener`.
 */
export async function watchFollowed(
  backend: PostgresBackend,
  name: string,
  listener: (event: LockEvent) => void,
): Promise<() => void> {
  const unfollow = backend.followChanges?.(name);
  const unwatch = backend.watch(name, listener);
  await backend.inspect(name);
  return () => {
    unwatch();
    unfollow?.();
  };
}

/**
 * A barrier for a test to hold a grant at its racy point: a trigger on `tables` (before each
 * insert or update of a row whose owner starts with `late`) that waits for the advisory lock
 * `barrier`. Take it with `pg_advisory_lock(barrier)` on the admin client first, let go with
 * `pg_advisory_unlock`; `waiting` counts dlm's statements held at it (or behind the late row).
 */
export function lateBarrier(scope: PostgresScope, tablePrefix: string, barrier: number) {
  return {
    async install(tables: readonly string[]): Promise<void> {
      await scope.admin().query(`CREATE OR REPLACE FUNCTION ${tablePrefix}barrier() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.owner LIKE 'late%' THEN PERFORM pg_advisory_xact_lock(${barrier}); END IF;
          RETURN NEW;
        END $$`);
      for (const table of tables) {
        await scope.admin().query(`CREATE OR REPLACE TRIGGER ${tablePrefix}${table}_barrier
          BEFORE INSERT OR UPDATE ON ${tablePrefix}${table}
          FOR EACH ROW EXECUTE FUNCTION ${tablePrefix}barrier()`);
      }
    },
    /** dlm's statements waiting for a lock: at the barrier, or behind the late caller's row. */
    async waiting(): Promise<number> {
      const result = await scope.admin().query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE application_name = 'dlm' AND wait_event_type = 'Lock'`,
      );
      return (result.rows[0] as { n: number }).n;
    },
  };
}
