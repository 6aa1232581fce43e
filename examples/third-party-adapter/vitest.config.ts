import { defineConfig } from 'vitest/config';

// Deliberately not the repo's shared config: a project outside the repo has its own, and the
// dlm packages resolve by their published `exports` (their built dist/), not their sources.
export default defineConfig({
  test: {
    name: 'third-party-adapter',
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
    // Starting a container can take a while the first time (an image pull).
    hookTimeout: 120_000,
    retry: process.env.CI === 'true' ? 1 : 0,
  },
});
