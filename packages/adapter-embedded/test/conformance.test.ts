import { oneInstance, runConformance } from '@dlm/conformance';
// @dlm/test-services is not among this package's dependencies; its process helpers are
// imported by path so temp dirs are still made (and removed) in the one shared place.
import { tempDir } from '@dlm/test-services';
import { afterAll } from 'vitest';
import { embeddedBackend } from '../src/index.js';

// The embedded backend is the service under test itself: one instance per store (oneInstance).

const memory = oneInstance(() => embeddedBackend());
runConformance('embedded (in memory)', memory);

const dataDir = tempDir('embedded-conformance');
const durable = oneInstance(() => embeddedBackend({ dataDir }));
runConformance('embedded (data dir)', {
  ...durable,
  // Close and reopen the same data dir; the kill -9 case has its own test (kill-9.test.ts).
  restart: durable.reopen,
});

afterAll(async () => {
  await Promise.all([memory.close(), durable.close()]);
});
