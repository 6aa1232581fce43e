import { defineConfig } from 'vitest/config';
import LongPolesFirst from './tooling/vitest/long-poles-first.ts';

export default defineConfig({
  test: {
    // Most files wait on real servers, timers and child processes rather than compute: six at a
    // time on 2 cores (vitest's default there is one). Measured on a quiet machine: four ended the
    // run in 747 s with the cores 18 % idle, six in 609 s with the last 280 s saturated (1,157
    // core-seconds of work, so no count of workers ends it before ~580 s).
    maxWorkers: 6,
    // The long files start first, so the run does not end on one that started last.
    sequence: { sequencer: LongPolesFirst },
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
