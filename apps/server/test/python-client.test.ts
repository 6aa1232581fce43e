import { afterAll, beforeAll, describe, it } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';
import { expectPassed, pythonAvailable, replayFromPython, runUnittest } from './python-runner.js';
import { serverConfigurations } from './server-configurations.js';

// The whole suite against the server as `pnpm start` runs it (journaled in a data dir), then the
// transcripts in memory here, and on the external backends in python-transcripts.test.ts.
const [journaled, ...others] = serverConfigurations();
const embedded = others.filter((configuration) => configuration.embedded);

describe.skipIf(!pythonAvailable)(`Python client (clients/python): ${journaled!.name}`, () => {
  let server: RunningServer;
  beforeAll(async () => {
    const backendConfig = await journaled!.start();
    server = await startServer({ port: 0, backendConfig: backendConfig() });
  });
  afterAll(async () => {
    await server?.close();
    await journaled!.stop();
  });

  it('passes its unittest suite, golden transcripts included, against a live server', {
    timeout: 180_000,
  }, async () => {
    expectPassed(await runUnittest(server.url));
  });
});

replayFromPython(embedded);
