import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The built entry points the harness starts as child processes. They run as plain JS: next
 * to this module when the harness itself runs built, from `dist/` when it runs from `src/`
 * under vitest.
 */
const HERE = new URL('./', import.meta.url);
const BUILT = import.meta.url.endsWith('.ts') ? new URL('../dist/', HERE) : HERE;

export function entryPoint(
  file: 'server-entry.js' | 'worker-entry.js' | 'resource-entry.js' | 'lock-worker-entry.js',
) {
  const path = fileURLToPath(new URL(file, BUILT));
  if (!existsSync(path)) {
    throw new Error(
      `${path} is missing: build the harness first (pnpm --filter @dlm/faults build)`,
    );
  }
  return path;
}
