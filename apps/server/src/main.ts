#!/usr/bin/env node
import { ConfigError, parseConfig, USAGE } from './config.js';
import { createLogger } from './logger.js';
import { startServer } from './server.js';

let config: ReturnType<typeof parseConfig>;
try {
  config = parseConfig(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`dlm-server: ${error.message}\n\n${USAGE}`);
  process.exit(2);
}
if (config === null) {
  process.stdout.write(USAGE);
  process.exit(0);
}

const logger = createLogger(config.logLevel);
const server = await startServer({
  host: config.host,
  port: config.port,
  backendConfig: config.backend,
  logger,
}).catch((error: unknown) => {
  logger.error('could not start', {
    error: error instanceof Error ? error.message : String(error),
  });
  process.exit(1);
});

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    logger.info('shutting down', { signal });
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error('shutdown failed', { error: String(error) });
        process.exit(1);
      },
    );
  });
}
