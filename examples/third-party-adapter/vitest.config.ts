import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
    // Starting a container can take a while the first time (an image pull).
    hookTimeout: 120_000,
  },
});
