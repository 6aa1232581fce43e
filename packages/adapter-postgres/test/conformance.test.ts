import { runConformance } from '@dlm/conformance';
import {
  type PostgresService,
  postgresAvailable,
  postgresManaged,
  startPostgres,
} from '@dlm/test-services';
import pg from 'pg';
import { afterAll, beforeAll, describe } from 'vitest';
import { postgresBackend } from '../src/index.js';

const run = postgresAvailable();

describe.skipIf(!run)('postgres adapter', () => {
  let postgres: PostgresService;
  beforeAll(async () => {
    postgres = await startPostgres();
  });
  afterAll(async () => {
    await postgres?.stop();
  });

  runConformance('postgres', {
    backend: async () => {
      const backend = postgresBackend({ url: postgres.url, tablePrefix: 'conformance_' });
      await backend.ready();
      return backend;
    },
    fairQueue: {
      // The entries of `name`'s queue in the waiters table, oldest first (live or not).
      entries: async (name) => {
        const client = new pg.Client({ connectionString: postgres.url });
        await client.connect();
        try {
          const result = await client.query(
            'SELECT id::text AS id FROM conformance_waiters WHERE name = $1 ORDER BY id',
            [name],
          );
          return (result.rows as { id: string }[]).map((row) => row.id);
        } finally {
          await client.end();
        }
      },
    },
    ...(postgresManaged()
      ? {
          restart: async () => {
            await postgres.kill();
            await postgres.start();
          },
        }
      : {}),
  });
});
