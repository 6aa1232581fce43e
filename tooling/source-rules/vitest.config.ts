import { projectConfig } from '../../tooling/vitest/shared.ts';

export default projectConfig(import.meta.dirname);
