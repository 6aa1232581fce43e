import { projectConfig } from './shared.ts';

export default projectConfig(import.meta.dirname);
