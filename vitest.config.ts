import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      'packages/*/vitest.config.ts',
      'apps/*/vitest.config.ts',
      'tooling/*/vitest.config.ts',
      // Not examples/*: the third-party example needs Docker and runs in CI's Docker stage.
      'examples/fencing-recipes/vitest.config.ts',
    ],
  },
});
