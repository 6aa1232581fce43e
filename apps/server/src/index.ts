export { type BackendConfig, ConfigError, parseConfig, type ServerConfig } from './config.js';
export { createLogger, type Logger, type LogLevel } from './logger.js';
export { type RunningServer, type ServerOptions, startServer } from './server.js';
