import { UsageError, usageFailure } from '@dlm/flags';
import { hashToken, newToken } from './auth.js';
import { type BackendConfig, baseServerOptions, parseConfig, usage } from './config.js';
import { createLogger } from './logger.js';
import { startServer } from './server.js';

/** Where the backend keeps the locks, for people: `embedded backend, data in /var/lib/dlm`. */
function backendInWords(backend: BackendConfig): string {
  if (backend.kind !== 'embedded') return `${backend.kind} backend`;
  return backend.dataDir === null
    ? 'embedded backend, in memory (nothing kept on disk)'
    : `embedded backend, data in ${backend.dataDir}`;
}

/**
 * Runs the server as a program: flags and environment from `argv`, logs on stderr, graceful
 * shutdown on SIGTERM/SIGINT. Exits 2 on a bad flag (the reason, and where the help is), 1 when it cannot start.
 * Used by `dlm-server` and by the CLI's `dlm serve`.
 */
export async function runServer(argv: string[], command = 'dlm-server'): Promise<void> {
  if (argv.includes('--new-token')) {
    const token = newToken();
    const sha256 = hashToken(token);
    process.stdout.write(
      `token:  ${token}\nsha256: ${sha256}\n\nA line for the token file (give the token to the client, keep only the hash):\nNAME ${sha256} lock,watch PREFIX/\n`,
    );
    process.exit(0);
  }
  let config: ReturnType<typeof parseConfig>;
  try {
    config = parseConfig(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(usageFailure(command, error));
    process.exit(2);
  }
  if (config === null) {
    process.stdout.write(usage(command));
    process.exit(0);
  }

  const logger = createLogger(config.logLevel);
  const server = await startServer(
    Object.assign({}, baseServerOptions(config, logger), {
      auth: config.auth,
      insecure: config.insecure,
      ...(config.tls ? { tls: config.tls } : {}),
      allowedOrigins: config.allowedOrigins,
      limits: config.limits,
      ...(config.dapr ? { dapr: config.dapr } : {}),
    }),
  ).catch((error: unknown) => {
    logger.error('could not start', {
      error: error instanceof Error ? error.message : String(error),
    });
    process.exit(1);
  });
  // The log is JSON lines, for machines; a person at a terminal also gets one line to read.
  if (process.stderr.isTTY && config.logLevel !== 'silent') {
    process.stderr.write(
      `dlm listening on ${server.url}, ${backendInWords(config.backend)}; dashboard at ${server.httpUrl}/\n`,
    );
  }

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
}
