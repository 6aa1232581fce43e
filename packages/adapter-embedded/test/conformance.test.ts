import { runConformance } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
// @dlm/test-services is not among this package's dependencies; its process helpers are
// imported by path so temp dirs are still made (and removed) in the one shared place.
import { tempDir } from '@dlm/test-services';
import { afterAll } from 'vitest';
import { embeddedBackend } from '../src/index.js';

// The embedded backend is the service under test itself: "another instance connected to the
// same service" is the same object, so every `backend()` call returns one shared instance and
// per-test cleanup leaves it open (each test uses its own lock names).

let memory: Promise<LockBackend> | undefined;
runConformance('embedded (in memory)', {
  backend: () => {
    memory ??= embeddedBackend();
    return memory;
  },
  cleanup: async () => {},
});

const dataDir = tempDir('embedded-conformance');
let durable: Promise<LockBackend> | undefined;
runConformance('embedded (data dir)', {
  backend: () => {
    durable ??= embeddedBackend({ dataDir });
    return durable;
  },
  cleanup: async () => {},
  // Close and reopen the same data dir; the kill -9 case has its own test (kill-9.test.ts).
  restart: async () => {
    const running = durable;
    durable = undefined;
    await (await running)?.close();
  },
});

afterAll(async () => {
  await Promise.all([memory, durable].map(async (backend) => (await backend)?.close()));
});
