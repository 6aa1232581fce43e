import { killAndStart, runConformance, useService } from '@dlm/conformance';
import { postgresAvailable, postgresManaged, startPostgres } from '@dlm/test-services';
import pg from 'pg';
import { describe } from 'vitest';
import { postgresBackend } from '../src/index.js';

const run = postgresAvailable();

describe.skipIf(!run)('postgres adapter', () => {
  const postgres = useService(() => startPostgres());

  runConformance('postgres', {
    backend: async () => {
      const backend = postgresBackend({ url: postgres().url, tablePrefix: 'conformance_' });
      await backend.ready();
      return backend;
    },
    fairQueue: {
      // The entries of `name`'s queue in the waiters table, oldest first (live or not).
      entries: async (name) => {
        const client = new pg.Client({ connectionString: postgres().url });
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
          restart: () => killAndStart(postgres()),
        }
      : {}),
  });
});
