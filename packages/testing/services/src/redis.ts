import { connect } from 'node:net';
import * as proc from './process.js';

/**
 * redis-server for tests: each instance a `ManagedProcess` on a free loopback port with its own
 * data dir, so a test can kill -9 it, pause it (SIGSTOP) or start it again with its data.
 * `DLM_TEST_REDIS_URL` (`redis://host:port`) points the tests at the user's own Redis instead;
 * then no process is started and kill/stop/pause/resume/start throw.
 */

export interface RedisService extends proc.ManagedProcess {
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

function externalService(url: URL, db: number): RedisService {
  const host = url.hostname || '127.0.0.1';
  const port = Number(url.port || 6379);
  const withDb = new URL(url.href);
  if (db > 0) withDb.pathname = `/${db}`;
  return {
    ...proc.externalProcess(`redis(${ENV})`, 'Redis', ENV),
    external: true,
    url: withDb.href.replace(/\/$/, ''),
    host,
    port,
    dir: '',
  };
}

/**
 * redis-server's arguments after the program name, the same for a process and a container:
 * no snapshots, AOF (fsynced on every write) only with `options.aof`, its files in `dir`.
 */
export function redisServerArgs(
  host: string,
  port: number,
  dir: string,
  options: RedisOptions,
): string[] {
  return [
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
  ];
}

/** The service over a redis-server we started (a process or a container). */
export function redisService(
  managed: proc.ManagedProcess,
  host: string,
  port: number,
  dir: string,
): RedisService {
  return proc.forwardProcess(managed, {
    url: `redis://${host}:${port}`,
    host,
    port,
    dir,
    external: false,
  });
}

/**
 * Starts one redis-server in the foreground on a free loopback port. Without `aof` nothing is
 * persisted (`--save ""`), so a restart forgets everything; with `aof`, `appendfsync always`
 * makes a `kill -9` lose nothing that was acknowledged.
 */
export async function startRedis(options: RedisOptions = {}): Promise<RedisService> {
  const external = externalUrl();
  if (external) return externalService(external, 0);
  return startRedisProcess(options);
}

/** A redis-server process of ours, whatever `DLM_TEST_REDIS_URL` says (Sentinel's members). */
export async function startRedisProcess(options: RedisOptions = {}): Promise<RedisService> {
  const binary = proc.findBinary('redis-server');
  if (!binary) throw new Error('redis-server is not on PATH (apt-get install redis-server)');
  const port = await proc.freePort();
  const dir = proc.tempDir('redis');
  const host = '127.0.0.1';
  const managed = await proc.startProcess({
    name: `redis-server:${port}`,
    command: binary,
    args: redisServerArgs(host, port, dir, options),
    cwd: dir,
    ...(options.env ? { env: options.env } : {}),
    ready: () => pingRedis(host, port),
  });
  return redisService(managed, host, port, dir);
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
  return proc.allStarted(
    Array.from({ length: n }, () => startRedis(options)),
    (node) => node.kill(),
  );
}
