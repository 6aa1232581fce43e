import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The built entry points the harness starts as child processes. They run as plain JS from
 * `dist/` (whether the harness itself runs from `dist/` or, under vitest, from `src/`).
 */
const DIST = fileURLToPath(new URL('../dist/', import.meta.url));

export function entryPoint(file: 'server-entry.js' | 'worker-entry.js' | 'resource-entry.js') {
  const path = `${DIST}${file}`;
  if (!existsSync(path)) {
    throw new Error(
      `${path} is missing: build the harness first (pnpm --filter @dlm/faults build)`,
    );
  }
  return path;
}
