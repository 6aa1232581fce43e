import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { type FlagOptions, parseFlags, parseInteger, UsageError } from '@dlm/flags';
import { AuthConfigError, parseTokenFile, type TokenGrant } from './auth.js';
import { parseDaprOptions } from './dapr-config.js';
import type { DaprOptions } from './dapr-locks.js';
import {
  DEFAULT_SERVER_LIMITS,
  LIMIT_FLAGS,
  LIMITS_OFF_AT_ZERO,
  limitEnvName,
  type ServerLimits,
} from './limits.js';
import { isLogLevel, type Logger, type LogLevel } from './logger.js';
import type { ServerOptions } from './server.js';

export type BackendConfig =
  | { kind: 'embedded'; dataDir: string | null }
  | {
      kind: 'redis';
      /** The server; with `sentinels` only its password and database; absent with `cluster`. */
      url?: string;
      durable?: boolean;
      /** Redis Cluster: `host:port` of some of its nodes (the rest are discovered). */
      cluster?: string[];
      /** Redis Sentinel: `host:port` of each sentinel, and the master's name they monitor. */
      sentinels?: string[];
      sentinelName?: string;
      /** Replicas that must confirm (WAIT) each write, and how long WAIT waits (ms). */
      minReplicas?: number;
      replicaTimeoutMs?: number;
    }
  | { kind: 'redlock'; urls: string[] }
  | { kind: 'etcd'; endpoints: string[] }
  | { kind: 'zookeeper'; connect: string }
  | { kind: 'postgres'; url: string };

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
      return `  ${flag.padEnd(33)}(${limitEnvName(LIMIT_FLAGS[key])}, ${byDefault})`;
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
  --backend KIND           embedded | redis | redlock | etcd | zookeeper | postgres (DLM_BACKEND,
                           default embedded)
  --data-dir DIR           embedded: where the journal lives (DLM_DATA_DIR,
                           default $XDG_STATE_HOME/dlm or ~/.local/state/dlm)
  --memory                 embedded: keep nothing on disk (DLM_MEMORY=1)
  --redis-url URL          redis: e.g. redis://127.0.0.1:6379 (DLM_REDIS_URL)
  --redis-durable          redis: it runs with appendonly yes + appendfsync always, so locks and
                           fencing tokens survive its restart (DLM_REDIS_DURABLE=1)
  --redis-cluster H:P,H:P  redis: a Redis Cluster, by some of its nodes, instead of --redis-url
                           (DLM_REDIS_CLUSTER)
  --redis-sentinels H:P,H:P  redis: ask these sentinels for the master instead of --redis-url
                           (DLM_REDIS_SENTINELS), with --redis-sentinel-name NAME: the master
                           they monitor (DLM_REDIS_SENTINEL_NAME)
  --redis-min-replicas N   redis: report a grant, extend or release only once N replicas have it
                           (WAIT), else UNAVAILABLE (DLM_REDIS_MIN_REPLICAS, default 0)
  --redis-replica-timeout-ms N  redis: how long WAIT waits for them
                           (DLM_REDIS_REPLICA_TIMEOUT_MS, default 500)
  --redlock-urls U1,U2,U3  redlock: independent Redis nodes (DLM_REDLOCK_URLS)
  --etcd-endpoints E1,E2   etcd: client URLs (DLM_ETCD_ENDPOINTS)
  --zk-connect H:P,H:P     zookeeper: connect string (DLM_ZK_CONNECT)
  --postgres-url URL       postgres: e.g. postgres://dlm@127.0.0.1:5432/dlm (DLM_POSTGRES_URL)
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

function defaultDataDir(env: NodeJS.ProcessEnv): string {
  const state = env.XDG_STATE_HOME || join(homedir(), '.local', 'state');
  return join(state, 'dlm');
}

function list(value: string | undefined, what: string): string[] {
  const items = (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
  if (!items.length) throw new UsageError(`${what} is required for this backend`);
  return items;
}

const BACKEND_KINDS = ['embedded', 'redis', 'redlock', 'etcd', 'zookeeper'] as const;

function isBackendKind(kind: string): kind is BackendConfig['kind'] {
  return (BACKEND_KINDS as readonly string[]).includes(kind);
}

/** The flags that configure one backend kind. */
const BACKEND_FLAGS: Readonly<Record<string, BackendConfig['kind']>> = {
  memory: 'embedded',
  'data-dir': 'embedded',
  'redis-url': 'redis',
  'redis-durable': 'redis',
  'redis-cluster': 'redis',
  'redis-sentinels': 'redis',
  'redis-sentinel-name': 'redis',
  'redis-min-replicas': 'redis',
  'redis-replica-timeout-ms': 'redis',
  'redlock-urls': 'redlock',
  'etcd-endpoints': 'etcd',
  'zk-connect': 'zookeeper',
};

const SERVER_FLAGS = {
  host: { type: 'string' },
  port: { type: 'string' },
  backend: { type: 'string' },
  'data-dir': { type: 'string' },
  memory: { type: 'boolean' },
  'redis-url': { type: 'string' },
  'redis-durable': { type: 'boolean' },
  'redis-cluster': { type: 'string' },
  'redis-sentinels': { type: 'string' },
  'redis-sentinel-name': { type: 'string' },
  'redis-min-replicas': { type: 'string' },
  'redis-replica-timeout-ms': { type: 'string' },
  'redlock-urls': { type: 'string' },
  'etcd-endpoints': { type: 'string' },
  'zk-connect': { type: 'string' },
  'postgres-url': { type: 'string' },
  'log-level': { type: 'string' },
  'auth-file': { type: 'string' },
  insecure: { type: 'boolean' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'allowed-origins': { type: 'string' },
  'dapr-stores': { type: 'string' },
  'dapr-grpc-port': { type: 'string' },
  ...Object.fromEntries(
    Object.values(LIMIT_FLAGS).map((flag) => [flag, { type: 'string' as const }]),
  ),
  help: { type: 'boolean', short: 'h' },
} as const satisfies FlagOptions;

/** The parsed flags and the environment (empty variables dropped), read the same way. */
interface Sources {
  values: Readonly<Record<string, string | boolean | undefined>>;
  env: NodeJS.ProcessEnv;
  /** A string flag's value. */
  flag(name: string): string | undefined;
  /** A boolean setting: its flag, or its variable set to `1` or `true`. */
  on(name: string, envName: string): boolean;
}

function sources(values: Sources['values'], rawEnv: NodeJS.ProcessEnv): Sources {
  // An empty environment variable counts as unset.
  const env = Object.fromEntries(Object.entries(rawEnv).filter(([, value]) => value !== ''));
  return {
    values,
    env,
    flag: (name) => values[name] as string | undefined,
    on: (name, envName) => values[name] === true || env[envName] === '1' || env[envName] === 'true',
  };
}

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
  const { flag } = from;
  // Checked in this order, so that of two mistakes the same one is reported as before.
  const port = parsePort(flag('port') ?? from.env.DLM_PORT ?? '7070');
  const logLevel = parseLogLevel(flag('log-level') ?? from.env.DLM_LOG_LEVEL ?? 'info');
  const backend = parseBackend(from);
  const limits = parseLimits(from);
  return {
    host: flag('host') ?? from.env.DLM_HOST ?? '127.0.0.1',
    port,
    backend,
    logLevel,
    auth: readAuth(flag('auth-file') ?? from.env.DLM_AUTH_FILE, from.env.DLM_AUTH_TOKENS),
    insecure: from.on('insecure', 'DLM_INSECURE'),
    tls: readTls(
      flag('tls-cert') ?? from.env.DLM_TLS_CERT,
      flag('tls-key') ?? from.env.DLM_TLS_KEY,
    ),
    allowedOrigins: (flag('allowed-origins') ?? from.env.DLM_ALLOWED_ORIGINS ?? '')
      .split(',')
      .map((origin) => origin.trim())
      .filter(Boolean),
    limits,
    dapr: parseDaprOptions(
      flag('dapr-stores') ?? from.env.DLM_DAPR_STORES,
      flag('dapr-grpc-port') ?? from.env.DLM_DAPR_GRPC_PORT,
    ),
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

/**
 * A flag for another backend than the one chosen is a mistake the user should hear of, not a
 * setting silently ignored (`--memory --backend redis` would otherwise serve Redis).
 * Environment variables may be set for several backends at once, so only flags are checked.
 */
function checkBackendFlags({ values, flag, env }: Sources, kind: string): void {
  /** Where the backend's choice came from, when not from --backend. */
  const source =
    flag('backend') !== undefined ? '' : env.DLM_BACKEND ? ' (DLM_BACKEND)' : ' (the default)';
  for (const [name, owner] of Object.entries(BACKEND_FLAGS)) {
    if (values[name] !== undefined && owner !== kind && isBackendKind(kind))
      throw new UsageError(
        `--${name} is for --backend ${owner}, but the backend is ${kind}${source}`,
      );
  }
}

function parseBackend(from: Sources): BackendConfig {
  const { flag, env } = from;
  const kind = flag('backend') ?? env.DLM_BACKEND ?? 'embedded';
  checkBackendFlags(from, kind);
  switch (kind) {
    case 'embedded': {
      const memory = from.on('memory', 'DLM_MEMORY');
      const dataDir = flag('data-dir') ?? env.DLM_DATA_DIR;
      if (memory && dataDir && flag('data-dir'))
        throw new UsageError('--memory and --data-dir exclude each other');
      return { kind, dataDir: memory ? null : (dataDir ?? defaultDataDir(env)) };
    }
    case 'redis':
      return parseRedis(from);
    case 'redlock':
      return { kind, urls: list(flag('redlock-urls') ?? env.DLM_REDLOCK_URLS, '--redlock-urls') };
    case 'etcd':
      return {
        kind,
        endpoints: list(flag('etcd-endpoints') ?? env.DLM_ETCD_ENDPOINTS, '--etcd-endpoints'),
      };
    case 'zookeeper':
      return {
        kind,
        connect: list(flag('zk-connect') ?? env.DLM_ZK_CONNECT, '--zk-connect').join(','),
      };
    case 'postgres': {
      const url = list(flag('postgres-url') ?? env.DLM_POSTGRES_URL, '--postgres-url')[0]!;
      if (!/^postgres(ql)?:\/\//.test(url))
        throw new UsageError(`--postgres-url must be a postgres:// URL, got ${url}`);
      return { kind, url };
    }
    default:
      throw new UsageError(
        `--backend must be embedded|redis|redlock|etcd|zookeeper|postgres, got ${kind}`,
      );
  }
}

/** `host:port,host:port,…` of `flagName`, each port 1-65535. */
function hostPorts(text: string, flagName: string): string[] {
  const items = list(text, flagName);
  for (const item of items) {
    const port = Number(/^[^:\s]+:(\d{1,5})$/.exec(item)?.[1] ?? Number.NaN);
    if (!(port >= 1 && port <= 65_535))
      throw new UsageError(`${flagName} takes host:port items (port 1-65535), got ${item}`);
  }
  return items;
}

/** `--backend redis`: one server by URL, the master that Sentinel names, or a Cluster. */
function parseRedis(from: Sources): BackendConfig {
  const { flag, env } = from;
  const clusterList = flag('redis-cluster') ?? env.DLM_REDIS_CLUSTER;
  const sentinelList = flag('redis-sentinels') ?? env.DLM_REDIS_SENTINELS;
  const urlText = flag('redis-url') ?? env.DLM_REDIS_URL;
  const minReplicas = flag('redis-min-replicas') ?? env.DLM_REDIS_MIN_REPLICAS;
  const replicaTimeout = flag('redis-replica-timeout-ms') ?? env.DLM_REDIS_REPLICA_TIMEOUT_MS;
  const common = {
    durable: from.on('redis-durable', 'DLM_REDIS_DURABLE'),
    ...(minReplicas === undefined
      ? {}
      : { minReplicas: parseInteger(minReplicas, '--redis-min-replicas', { min: 0 }) }),
    ...(replicaTimeout === undefined
      ? {}
      : { replicaTimeoutMs: parseInteger(replicaTimeout, '--redis-replica-timeout-ms') }),
  };
  if (clusterList !== undefined) {
    if (flag('redis-url') !== undefined)
      throw new UsageError('--redis-url and --redis-cluster exclude each other');
    if (sentinelList !== undefined)
      throw new UsageError('--redis-sentinels and --redis-cluster exclude each other');
    return { kind: 'redis', cluster: hostPorts(clusterList, '--redis-cluster'), ...common };
  }
  if (sentinelList === undefined) {
    if (flag('redis-sentinel-name') !== undefined)
      throw new UsageError('--redis-sentinel-name needs --redis-sentinels');
    return { kind: 'redis', url: list(urlText, '--redis-url')[0]!, ...common };
  }
  const sentinels = hostPorts(sentinelList, '--redis-sentinels');
  const sentinelName = flag('redis-sentinel-name') ?? env.DLM_REDIS_SENTINEL_NAME;
  if (!sentinelName)
    throw new UsageError('--redis-sentinel-name is required with --redis-sentinels');
  return {
    kind: 'redis',
    sentinels,
    sentinelName,
    ...(urlText === undefined ? {} : { url: list(urlText, '--redis-url')[0]! }),
    ...common,
  };
}

/** The limits set by flag or environment, each an integer (0 = off where that is allowed). */
function parseLimits({ flag, env }: Sources): Partial<ServerLimits> {
  const limits: Partial<ServerLimits> = {};
  for (const [key, name] of Object.entries(LIMIT_FLAGS) as [keyof ServerLimits, string][]) {
    const text = flag(name) ?? env[limitEnvName(name)];
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
