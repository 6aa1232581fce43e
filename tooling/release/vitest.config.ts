import { projectConfig } from '../../tooling/vitest/shared.ts';

// npm installs from the registry (third-party dependencies) take a while on a loaded machine.
export default projectConfig(import.meta.dirname, { testTimeoutMs: 240_000 });
