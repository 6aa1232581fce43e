import { projectConfig } from '../../tooling/vitest/shared.ts';

// Each scenario kills and restarts cluster members and dlm servers: allow a minute per test.
export default projectConfig(import.meta.dirname, { testTimeoutMs: 60_000 });
