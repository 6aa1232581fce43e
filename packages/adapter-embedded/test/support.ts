import { join } from 'node:path';
import type { LockBackend } from '@dlm/core';
import { afterEach } from 'vitest';
import { embeddedBackend } from '../src/index.js';

/**
 * The opener of the enclosing scope's embedded backends: each one it opens is closed after the
 * test that opened it, so the next test can open the same data dir again.
 */
export function useBackends(): (
  options: Parameters<typeof embeddedBackend>[0],
) => Promise<LockBackend> {
  const open: LockBackend[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((backend) => backend.close()));
  });
  return async (options) => {
    const backend = await embeddedBackend(options);
    open.push(backend);
    return backend;
  };
}

/** The journal file the backend writes in `dataDir`. */
export const journalOf = (dataDir: string): string => join(dataDir, 'journal.log');
