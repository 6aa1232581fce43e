import { projectConfig } from '../../tooling/vitest/shared.ts';

// A block that starts the server through pnpm (install, turbo build, start) takes a while.
export default projectConfig(import.meta.dirname, { testTimeoutMs: 120_000 });
