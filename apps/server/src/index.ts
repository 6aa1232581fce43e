export {
  AuthConfigError,
  type Authenticator,
  createAuthenticator,
  hashToken,
  newToken,
  parseTokenFile,
  type TokenGrant,
} from './auth.js';
export type { BackendKind, OpenContext } from './backend-kind.js';
export { BACKEND_KIND_NAMES, BACKEND_KINDS, backendArgs } from './backends/index.js';
export { CLOSE } from './close-codes.js';
export {
  type BackendConfig,
  baseServerOptions,
  ConfigError,
  parseConfig,
  type ServerConfig,
  USAGE,
  usage,
} from './config.js';
export { type CreateBackendOptions, createBackend } from './create-backend.js';
export type { DaprOptions } from './dapr-locks.js';
export { DEFAULT_SERVER_LIMITS, type ServerLimits } from './limits.js';
export { createLogger, type Logger, type LogLevel, pinoLogger } from './logger.js';
export type { Action, Principal } from './permissions.js';
export { runServer } from './run.js';
export { type RunningServer, type ServerOptions, startServer } from './server.js';
