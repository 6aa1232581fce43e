import { connect } from 'node:net';
import {
  findBinary,
  freePort,
  type ManagedProcess,
  serviceAvailable,
  startProcess,
  tempDir,
} from './process.js';

/**
 * redis-server for tests: each instance a `ManagedProcess` on a free loopback port with its own
 * data dir, so a test can kill -9 it, pause it (SIGSTOP) or start it again with its data.
 * `DLM_TEST_REDIS_URL` (`redis://host:port`) points the tests at the user's own Redis instead;
 * then no process is started and kill/stop/pause/resume/start throw.
 */

export interface RedisService extends ManagedProcess {
  /** `redis://127.0.0.1:PORT` (with `/DB` for extra nodes on an external Redis). */
  readonly url: string;
  readonly port: number;
  readonly host: string;
  /** The data directory (AOF lives here); empty for an external Redis. */
  readonly dir: string;
  /** True when this is the user's Redis from `DLM_TEST_REDIS_URL` (not ours to kill). */
  readonly external: boolean;
}

export interface RedisOptions {
  /** `--appendonly yes --appendfsync always`: every write is on disk before the reply. */
  aof?: boolean;
  /** More redis-server arguments, e.g. `['--rename-command', 'CONFIG', '']` to act like a managed Redis. */
  args?: string[];
  /**
   * More environment for a local redis-server process (the fault harness preloads a clock
   * shim with it); not used for containers or an external Redis.
   */
  env?: Record<string, string>;
}

const ENV = 'DLM_TEST_REDIS_URL';

function externalUrl(): URL | undefined {
  const value = process.env[ENV]?.trim();
  if (!value) return undefined;
  return new URL(/^rediss?:\/\//.test(value) ? value : `redis://${value}`);
}

/**
 * Whether Redis tests can run: `DLM_TEST_REDIS_URL` is set or `redis-server` is on PATH. With
 * CI=true a missing redis-server throws instead of skipping.
 */
export function redisAvailable(): boolean {
  return serviceAvailable(
    'redis-server',
    externalUrl() !== undefined || findBinary('redis-server') !== null,
  );
}

/** Whether instances can be killed, paused and restarted (false against the user's Redis). */
export function redisManaged(): boolean {
  return externalUrl() === undefined;
}

/** Sends PING over a raw socket; true once the answer is `+PONG` (not `-LOADING`). */
export function pingRedis(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let reply = '';
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.on('error', () => done(false));
    socket.on('close', () => done(false));
  });
}

function unsupported(what: string): never {
  throw new Error(
    `${what} is not supported against the external Redis from ${ENV}: it is not ours to control`,
  );
}

function externalService(url: URL, db: number): RedisService {
  const host = url.hostname || '127.0.0.1';
  const port = Number(url.port || 6379);
  const withDb = new URL(url.href);
  if (db > 0) withDb.pathname = `/${db}`;
  return {
    name: `redis(${ENV})`,
    pid: undefined,
    running: true,
    external: true,
    url: withDb.href.replace(/\/$/, ''),
    host,
    port,
    dir: '',
    output: () => '',
    kill: () => Promise.reject(new Error(`kill: not supported against ${ENV}`)),
    stop: async () => {},
    pause: () => unsupported('pause'),
    resume: () => unsupported('resume'),
    start: () => Promise.reject(new Error(`start: not supported against ${ENV}`)),
  };
}

/**
 * Starts one redis-server in the foreground on a free loopback port. Without `aof` nothing is
 * persisted (`--save ""`), so a restart forgets everything; with `aof`, `appendfsync always`
 * makes a `kill -9` lose nothing that was acknowledged.
 */
export async function startRedis(options: RedisOptions = {}): Promise<RedisService> {
  const external = externalUrl();
  if (external) return externalService(external, 0);

  const binary = findBinary('redis-server');
  if (!binary) throw new Error('redis-server is not on PATH (apt-get install redis-server)');
  const port = await freePort();
  const dir = tempDir('redis');
  const host = '127.0.0.1';
  const managed = await startProcess({
    name: `redis-server:${port}`,
    command: binary,
    args: [
      '--port',
      String(port),
      '--bind',
      host,
      '--save',
      '',
      '--appendonly',
      options.aof ? 'yes' : 'no',
      '--appendfsync',
      'always',
      '--dir',
      dir,
      ...(options.args ?? []),
    ],
    cwd: dir,
    ...(options.env ? { env: options.env } : {}),
    ready: () => pingRedis(host, port),
  });
  // Spread would copy the getters' current values: forward them instead.
  return {
    get name() {
      return managed.name;
    },
    get pid() {
      return managed.pid;
    },
    get running() {
      return managed.running;
    },
    output: () => managed.output(),
    kill: () => managed.kill(),
    stop: (graceMs?: number) => managed.stop(graceMs),
    pause: () => managed.pause(),
    resume: () => managed.resume(),
    start: () => managed.start(),
    url: `redis://${host}:${port}`,
    host,
    port,
    dir,
    external: false,
  };
}

/**
 * `n` independent redis-servers (for Redlock), started in parallel. Against an external Redis
 * the "nodes" are databases 0..n-1 of that one server: independent keyspaces, but not
 * independent failures, so fault tests must check `redisManaged()`.
 */
export async function startRedisNodes(
  n: number,
  options: RedisOptions = {},
): Promise<RedisService[]> {
  const external = externalUrl();
  if (external) return Array.from({ length: n }, (_, db) => externalService(external, db));
  const started = await Promise.allSettled(Array.from({ length: n }, () => startRedis(options)));
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await Promise.all(nodes.map((node) => node.kill()));
    throw failed.reason;
  }
  return nodes;
}
