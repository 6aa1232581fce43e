import { readFileSync } from 'node:fs';
import {
  type FlagOptions,
  flagsOf,
  HELP_FLAG,
  parseFlags,
  parseInteger,
  UsageError,
} from '@dlm/flags';
import { AuthConfigError, parseTokenFile, type TokenGrant } from './auth.js';
import {
  BACKEND_FLAG_TYPES,
  BACKEND_KIND_NAMES,
  type BackendConfig,
  backendHelp,
  parseBackend,
} from './backends/index.js';
import { envNameOf, type Sources, sources } from './config-sources.js';
import { parseDaprOptions } from './dapr-config.js';
import type { DaprOptions } from './dapr-locks.js';
import {
  DEFAULT_SERVER_LIMITS,
  LIMIT_FLAGS,
  LIMITS_OFF_AT_ZERO,
  type ServerLimits,
} from './limits.js';
import { isLogLevel, type Logger, type LogLevel } from './logger.js';
import type { ServerOptions } from './server.js';

export type { BackendConfig };

export interface ServerConfig {
  host: string;
  port: number;
  backend: BackendConfig;
  logLevel: LogLevel;
  /** Bearer tokens from `--auth-file` or `DLM_AUTH_TOKENS`; empty: no authentication. */
  auth: TokenGrant[];
  /** Allow a non-loopback host without tokens. */
  insecure: boolean;
  /** PEM certificate and key, read from `--tls-cert` and `--tls-key`. */
  tls: { cert: Buffer; key: Buffer } | null;
  allowedOrigins: string[];
  /** The limits set by flag or environment; the rest keep their defaults. */
  limits: Partial<ServerLimits>;
  /** Dapr's lock API: `--dapr-stores`, `--dapr-grpc-port`; null when not configured. */
  dapr: DaprOptions | null;
}

function limitLines(): string {
  return (Object.keys(LIMIT_FLAGS) as (keyof ServerLimits)[])
    .map((key) => {
      const flag = `--${LIMIT_FLAGS[key]} N`;
      const byDefault = LIMITS_OFF_AT_ZERO.has(key)
        ? `0 = off${DEFAULT_SERVER_LIMITS[key] ? `, default ${DEFAULT_SERVER_LIMITS[key]}` : ', the default'}`
        : `default ${DEFAULT_SERVER_LIMITS[key]}`;
      return `  ${flag.padEnd(33)}(${envNameOf(LIMIT_FLAGS[key])}, ${byDefault})`;
    })
    .join('\n');
}

/** The help text, for the command that runs the server (`dlm-server`, `dlm serve`). */
export function usage(command = 'dlm-server'): string {
  return `Usage: ${command} [options]

Serves the dlm protocol at ws://HOST:PORT/v1/ws, and on the same port: its lock methods over
plain HTTP (POST /v1/rpc, OpenAPI at /v1/openapi.json), Dapr's lock API, the dashboard (/),
Prometheus metrics (/metrics), the admin API (/v1/locks), /livez (the process serves) and
/readyz (the backend answers; /healthz is the same): route clients by /readyz.

Options (each has an environment variable; flags win):
  --host HOST              address to bind (DLM_HOST, default 127.0.0.1)
  --port PORT              port to listen on (DLM_PORT, default 7070)
  --backend KIND           ${BACKEND_KIND_NAMES.join(' | ')} (DLM_BACKEND,
                           default embedded)
${backendHelp()}
  --log-level LEVEL        debug | info | warn | error | silent (DLM_LOG_LEVEL, default info);
                           JSON lines on stderr, one per session, revocation, backend change

Security (see the README's Security section):
  --auth-file FILE         bearer tokens, by SHA-256, with their prefixes and actions
                           (DLM_AUTH_FILE; or the file's content in DLM_AUTH_TOKENS)
  --new-token              print a new random token, its SHA-256 and a token-file line, and exit
  --insecure               listen on a non-loopback address without tokens (DLM_INSECURE=1)
  --tls-cert FILE          PEM certificate chain: serve wss:// and https:// (DLM_TLS_CERT)
  --tls-key FILE           its PEM private key (DLM_TLS_KEY)
  --allowed-origins O1,O2  browser origins allowed besides the server's own; * for any
                           (DLM_ALLOWED_ORIGINS)

Dapr's lock API (see docs/dapr.md), over HTTP on this port and over gRPC on its own:
  --dapr-stores S=P,S=P    Dapr lock stores and the lock-name prefix each maps to, e.g.
                           lockstore=dapr/ (DLM_DAPR_STORES)
  --dapr-grpc-port PORT    serve Dapr's gRPC API on PORT (DLM_DAPR_GRPC_PORT; default off)

Limits (integers):
${limitLines()}

  -h, --help               print this help
`;
}

export const USAGE = usage();

/**
 * Thrown for a bad flag or environment value; main prints it with the usage and exits 2.
 * @deprecated The one `UsageError` of `@dlm/flags`, under its old name: catch `UsageError`.
 */
export const ConfigError = UsageError;
/** @deprecated `UsageError` of `@dlm/flags`. */
export type ConfigError = UsageError;

const SERVER_FLAGS = {
  ...flagsOf(
    'string',
    'host',
    'port',
    'backend',
    'log-level',
    'auth-file',
    'tls-cert',
    'tls-key',
    'allowed-origins',
    'dapr-stores',
    'dapr-grpc-port',
    ...Object.values(LIMIT_FLAGS),
  ),
  ...flagsOf('boolean', 'insecure'),
  ...BACKEND_FLAG_TYPES,
  ...HELP_FLAG,
} as const satisfies FlagOptions;

/**
 * What every program that serves from a parsed config passes to `startServer` (`dlm-server`,
 * the fault harness's server): where to listen, which backend, and the logger.
 */
export function baseServerOptions(
  config: ServerConfig,
  logger: Logger,
): Pick<ServerOptions, 'host' | 'port' | 'backendConfig' | 'logger'> {
  return { host: config.host, port: config.port, backendConfig: config.backend, logger };
}

/** Reads flags and environment into a config; `null` means `--help` was asked for. */
export function parseConfig(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): ServerConfig | null {
  // `pnpm start -- --memory` hands the server its `--`: parseFlags drops a leading one.
  const { values } = parseFlags(argv, SERVER_FLAGS);
  if (values.help) return null;
  const from = sources(values, env);
  const { setting } = from;
  // Checked in this order, so that of two mistakes the same one is reported as before.
  const port = parsePort(setting('port') ?? '7070');
  const logLevel = parseLogLevel(setting('log-level') ?? 'info');
  const backend = parseBackend(from);
  const limits = parseLimits(from);
  return {
    host: setting('host') ?? '127.0.0.1',
    port,
    backend,
    logLevel,
    auth: readAuth(setting('auth-file'), from.env.DLM_AUTH_TOKENS),
    insecure: from.on('insecure'),
    tls: readTls(setting('tls-cert'), setting('tls-key')),
    allowedOrigins: (setting('allowed-origins') ?? '')
      .split(',')
      .map((origin) => origin.trim())
      .filter(Boolean),
    limits,
    dapr: parseDaprOptions(setting('dapr-stores'), setting('dapr-grpc-port')),
  };
}

function parsePort(text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port > 65_535)
    throw new UsageError(`--port must be 0-65535, got ${text}`);
  return port;
}

function parseLogLevel(text: string): LogLevel {
  if (!isLogLevel(text))
    throw new UsageError(`--log-level must be debug|info|warn|error|silent, got ${text}`);
  return text;
}

/** The limits set by flag or environment, each an integer (0 = off where that is allowed). */
function parseLimits({ setting }: Sources): Partial<ServerLimits> {
  const limits: Partial<ServerLimits> = {};
  for (const [key, name] of Object.entries(LIMIT_FLAGS) as [keyof ServerLimits, string][]) {
    const text = setting(name);
    if (text === undefined) continue;
    limits[key] = LIMITS_OFF_AT_ZERO.has(key)
      ? parseInteger(text, `--${name}`, { min: 0, note: '0 = off' })
      : parseInteger(text, `--${name}`);
  }
  const headersTimeoutMs = limits.headersTimeoutMs ?? DEFAULT_SERVER_LIMITS.headersTimeoutMs;
  const requestTimeoutMs = limits.requestTimeoutMs ?? DEFAULT_SERVER_LIMITS.requestTimeoutMs;
  if (headersTimeoutMs > requestTimeoutMs)
    throw new UsageError('--headers-timeout-ms must not exceed --request-timeout-ms');
  return limits;
}

function readFile(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new UsageError(`cannot read ${what} ${path}: ${(error as Error).message}`);
  }
}

function readAuth(file: string | undefined, inline: string | undefined): TokenGrant[] {
  if (file !== undefined && inline !== undefined)
    throw new UsageError('give tokens in --auth-file (DLM_AUTH_FILE) or DLM_AUTH_TOKENS, not both');
  if (file === undefined && inline === undefined) return [];
  const source = file === undefined ? 'DLM_AUTH_TOKENS' : file;
  const text = file === undefined ? inline! : readFile(file, 'the token file').toString('utf8');
  try {
    const grants = parseTokenFile(text);
    if (!grants.length) throw new AuthConfigError('no tokens in it');
    return grants;
  } catch (error) {
    if (error instanceof AuthConfigError) throw new UsageError(`${source}: ${error.message}`);
    throw error;
  }
}

function readTls(cert: string | undefined, key: string | undefined) {
  if (cert === undefined && key === undefined) return null;
  if (cert === undefined || key === undefined)
    throw new UsageError('--tls-cert and --tls-key go together');
  return { cert: readFile(cert, 'the TLS certificate'), key: readFile(key, 'the TLS key') };
}
