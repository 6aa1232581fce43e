export {
  type BackendConfig,
  ConfigError,
  parseConfig,
  type ServerConfig,
  USAGE,
  usage,
} from './config.js';
export { createLogger, type Logger, type LogLevel, pinoLogger } from './logger.js';
export { runServer } from './run.js';
export { type RunningServer, type ServerOptions, startServer } from './server.js';
