import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
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
