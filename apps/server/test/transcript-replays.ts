import { loadTranscripts, runTranscript } from '@dlm/transcripts';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { type BackendConfig, startServer } from '../src/index.js';
import { replays, type ServerConfiguration } from './server-configurations.js';

/**
 * Every golden transcript in @dlm/protocol, replayed against a fresh in-process server (so no
 * name, token or session state carries over from one transcript to the next), once per
 * configuration. The configurations are split over two files (transcripts.test.ts: the embedded
 * ones; transcripts-backends.test.ts: Redis, PostgreSQL, ZooKeeper) so they replay side by side.
 */
export function replayTranscripts(configurations: readonly ServerConfiguration[]): void {
  const transcripts = loadTranscripts();
  for (const configuration of configurations) {
    describe.skipIf(!configuration.available)(`golden transcripts: ${configuration.name}`, () => {
      let backendConfig: () => BackendConfig;
      beforeAll(async () => {
        backendConfig = await configuration.start();
      }, 60_000);
      afterAll(() => configuration.stop());

      for (const transcript of transcripts.filter((one) => replays(configuration, one))) {
        it(`${transcript.name}: ${transcript.description}`, { timeout: 30_000 }, async () => {
          const server = await startServer({ port: 0, backendConfig: backendConfig() });
          try {
            await runTranscript(server.url, transcript);
          } finally {
            await server.close();
          }
        });
      }
    });
  }
}
