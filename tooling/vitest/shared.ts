import { basename } from 'node:path';
import { defineProject } from 'vitest/config';

/**
 * The one vitest setup every package uses. Tests import workspace packages through the
 * `@dlm/source` export condition, so they run against `src/` without a build step; the
 * published `exports` fall through to `dist/`.
 */
export function projectConfig(dir: string, overrides: { testTimeoutMs?: number } = {}) {
  return defineProject({
    resolve: { conditions: ['@dlm/source'] },
    ssr: { resolve: { conditions: ['@dlm/source'] } },
    test: {
      name: basename(dir),
      root: dir,
      include: ['test/**/*.test.ts'],
      testTimeout: overrides.testTimeoutMs ?? 20_000,
      hookTimeout: 60_000,
      // In CI, 2 shared cores run real servers with timing-sensitive tests: one retry keeps a
      // scheduling hiccup from failing the run, while a real bug still fails both attempts.
      retry: process.env.CI === 'true' ? 1 : 0,
    },
  });
}
