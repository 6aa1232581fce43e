import { runConformance } from '@dlm/conformance';
import {
  type PostgresService,
  postgresAvailable,
  postgresManaged,
  startPostgres,
} from '@dlm/test-services';
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
