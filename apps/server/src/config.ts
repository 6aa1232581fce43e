import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { isLogLevel, type LogLevel } from './logger.js';

export type BackendConfig =
  | { kind: 'embedded'; dataDir: string | null }
  | { kind: 'redis'; url: string }
  | { kind: 'redlock'; urls: string[] }
  | { kind: 'etcd'; endpoints: string[] }
  | { kind: 'zookeeper'; connect: string };

export interface ServerConfig {
  host: string;
  port: number;
  backend: BackendConfig;
  logLevel: LogLevel;
}

/** The help text, for the command that runs the server (`dlm-server`, `dlm serve`). */
export function usage(command = 'dlm-server'): string {
  return `Usage: ${command} [options]

Serves the dlm protocol at ws://HOST:PORT/v1/ws, and on the same port: the dashboard (/),
Prometheus metrics (/metrics), the admin API (/v1/locks) and /healthz.

Options (each has an environment variable; flags win):
  --host HOST              address to bind (DLM_HOST, default 127.0.0.1)
  --port PORT              port to listen on (DLM_PORT, default 7070)
  --backend KIND           embedded | redis | redlock | etcd | zookeeper (DLM_BACKEND, default embedded)
  --data-dir DIR           embedded: where the journal lives (DLM_DATA_DIR,
                           default $XDG_STATE_HOME/dlm or ~/.local/state/dlm)
  --memory                 embedded: keep nothing on disk (DLM_MEMORY=1)
  --redis-url URL          redis: e.g. redis://127.0.0.1:6379 (DLM_REDIS_URL)
  --redlock-urls U1,U2,U3  redlock: independent Redis nodes (DLM_REDLOCK_URLS)
  --etcd-endpoints E1,E2   etcd: client URLs (DLM_ETCD_ENDPOINTS)
  --zk-connect H:P,H:P     zookeeper: connect string (DLM_ZK_CONNECT)
  --log-level LEVEL        debug | info | warn | error | silent (DLM_LOG_LEVEL, default info);
                           JSON lines on stderr, one per session, revocation, backend change
  -h, --help               print this help
`;
}

export const USAGE = usage();

/** Thrown for a bad flag or environment value; main prints it with the usage and exits 2. */
export class ConfigError extends Error {}

function defaultDataDir(env: NodeJS.ProcessEnv): string {
  const state = env.XDG_STATE_HOME || join(homedir(), '.local', 'state');
  return join(state, 'dlm');
}

function list(value: string | undefined, what: string): string[] {
  const items = (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
  if (!items.length) throw new ConfigError(`${what} is required for this backend`);
  return items;
}

/** Reads flags and environment into a config; `null` means `--help` was asked for. */
export function parseConfig(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): ServerConfig | null {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        host: { type: 'string' },
        port: { type: 'string' },
        backend: { type: 'string' },
        'data-dir': { type: 'string' },
        memory: { type: 'boolean' },
        'redis-url': { type: 'string' },
        'redlock-urls': { type: 'string' },
        'etcd-endpoints': { type: 'string' },
        'zk-connect': { type: 'string' },
        'log-level': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  if (values.help) return null;
  const flag = (key: string) => values[key] as string | undefined;
  // An empty environment variable counts as unset.
  env = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== ''));

  const host = flag('host') ?? env.DLM_HOST ?? '127.0.0.1';
  const portText = flag('port') ?? env.DLM_PORT ?? '7070';
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65_535)
    throw new ConfigError(`--port must be 0-65535, got ${portText}`);
  const logLevel = flag('log-level') ?? env.DLM_LOG_LEVEL ?? 'info';
  if (!isLogLevel(logLevel))
    throw new ConfigError(`--log-level must be debug|info|warn|error|silent, got ${logLevel}`);

  const kind = flag('backend') ?? env.DLM_BACKEND ?? 'embedded';
  let backend: BackendConfig;
  switch (kind) {
    case 'embedded': {
      const memory = values.memory === true || env.DLM_MEMORY === '1' || env.DLM_MEMORY === 'true';
      const dataDir = flag('data-dir') ?? env.DLM_DATA_DIR;
      if (memory && dataDir && flag('data-dir'))
        throw new ConfigError('--memory and --data-dir exclude each other');
      backend = { kind, dataDir: memory ? null : (dataDir ?? defaultDataDir(env)) };
      break;
    }
    case 'redis':
      backend = { kind, url: list(flag('redis-url') ?? env.DLM_REDIS_URL, '--redis-url')[0]! };
      break;
    case 'redlock':
      backend = {
        kind,
        urls: list(flag('redlock-urls') ?? env.DLM_REDLOCK_URLS, '--redlock-urls'),
      };
      break;
    case 'etcd':
      backend = {
        kind,
        endpoints: list(flag('etcd-endpoints') ?? env.DLM_ETCD_ENDPOINTS, '--etcd-endpoints'),
      };
      break;
    case 'zookeeper':
      backend = {
        kind,
        connect: list(flag('zk-connect') ?? env.DLM_ZK_CONNECT, '--zk-connect').join(','),
      };
      break;
    default:
      throw new ConfigError(`--backend must be embedded|redis|redlock|etcd|zookeeper, got ${kind}`);
  }
  return { host, port, backend, logLevel };
}
