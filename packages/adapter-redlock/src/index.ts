export {
  type RedlockBackend,
  type RedlockBackendOptions,
  redlockBackend,
} from './redlock-backend.js';
