import { killAndStart, runConformance, useService } from '@dlm/conformance';
import { postgresAvailable, postgresManaged, startPostgres } from '@dlm/test-services';
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
    ...(postgresManaged()
      ? {
          restart: () => killAndStart(postgres()),
        }
      : {}),
  });
});
