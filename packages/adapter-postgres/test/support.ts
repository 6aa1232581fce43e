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
  /** A ready backend on the scope's table prefix (`options` win), closed after the scope's tests. */
  open(options?: PostgresBackendOptions): Promise<PostgresBackend>;
}

/**
 * Starts PostgreSQL and connects an admin client before the enclosing scope's tests (file or
 * `describe`); after them closes the backends `open` made, then the admin client, then the server.
 */
export function usePostgres(tablePrefix: string): PostgresScope {
  let postgres: PostgresService | undefined;
  let admin: pg.Client | undefined;
  const opened: PostgresBackend[] = [];
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('PostgreSQL starts in beforeAll');
    return value;
  };
  const reconnectAdmin = async () => {
    admin = new pg.Client({ connectionString: started(postgres).url });
    await admin.connect();
  };
  beforeAll(async () => {
    postgres = await startPostgres();
    await reconnectAdmin();
  });
  afterAll(async () => {
    for (const backend of opened) await backend.close().catch(() => {});
    await admin?.end().catch(() => {});
    await postgres?.stop();
  });
  return {
    postgres: () => started(postgres),
    admin: () => started(admin),
    reconnectAdmin,
    open: async (options = {}) => {
      const backend = postgresBackend({ url: started(postgres).url, tablePrefix, ...options });
      opened.push(backend);
      await backend.ready();
      return backend;
    },
  };
}
