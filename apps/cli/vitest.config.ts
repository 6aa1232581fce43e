import { projectConfig } from '../../tooling/vitest/shared.ts';

// Each test starts several `dlm` processes (a node start each, seconds on a loaded machine):
// the default 20 s per test ran out under load while every step was still on its way.
export default projectConfig(import.meta.dirname, { testTimeoutMs: 45_000 });
