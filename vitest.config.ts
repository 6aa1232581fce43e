import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The default report, then the run's unhandled errors again where a log's tail keeps them.
    reporters: ['default', './tooling/vitest/unhandled-errors-last.ts'],
    projects: [
      'packages/*/vitest.config.ts',
      'apps/*/vitest.config.ts',
      'packages/testing/*/vitest.config.ts',
      'tooling/*/vitest.config.ts',
      // Both examples take their services from @dlm/test-services (local binaries first).
      'examples/*/vitest.config.ts',
      // The deployment files: the Kubernetes manifests against the API schemas and a server.
      'deploy/vitest.config.ts',
    ],
  },
});
