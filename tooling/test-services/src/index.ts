export {
  findBinary,
  freePort,
  type ManagedProcess,
  type ProcessSpec,
  serviceAvailable,
  startProcess,
  tempDir,
} from './process.js';
