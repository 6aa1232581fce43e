import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import * as proc from './process.js';
import { type RedisOptions, type RedisService, startRedisProcess } from './redis.js';

/**
 * A Redis Sentinel deployment for tests: a master, two replicas (`--replicaof`) and three
 * Debian `redis-sentinel` processes (quorum 2, `down-after-milliseconds` 1000), each on a free
 * loopback port. Ready once every sentinel names the same master and knows both replicas and
 * the other two sentinels, so a `killMaster()` is followed by a failover.
 * `DLM_TEST_REDIS_SENTINELS` (`host:port,…`) with `DLM_TEST_REDIS_SENTINEL_NAME` points the
 * tests at the user's own Sentinel deployment instead; then nothing is started and
 * `killMaster()` throws.
 */

export interface SentinelAddress {
  host: string;
  port: number;
}

export interface RedisSentinelService {
  /** The master's name the sentinels monitor (`sentinel monitor NAME …`). */
  readonly name: string;
  readonly sentinels: SentinelAddress[];
  /** The sentinels as `host:port,host:port,…` (for `--redis-sentinels`). */
  readonly hostPorts: string;
  /** The `dlm-server` flags that point at this deployment (`--backend redis --redis-sentinels …`). */
  readonly serverArgs: string[];
  /** The redis-servers, the first master at first; empty for an external deployment. */
  readonly servers: RedisService[];
  /** The redis-sentinel processes; empty for an external deployment. */
  readonly sentinelProcesses: proc.ManagedProcess[];
  /** True when this is the user's deployment from `DLM_TEST_REDIS_SENTINELS`. */
  readonly external: boolean;
  /** The master the sentinels agree on now (waits up to `timeoutMs` for them to agree). */
  master(timeoutMs?: number): Promise<SentinelAddress>;
  /**
   * kill -9 of the current master's process; resolves with the killed server (start it again
   * with `start()`: it comes back as a master until the sentinels make it a replica).
   */
  killMaster(): Promise<RedisService>;
  /** Waits until the sentinels agree on a master other than `old` (a failover happened). */
  failedOver(old: SentinelAddress, timeoutMs?: number): Promise<SentinelAddress>;
  /** Stops the sentinels, then the servers. */
  stop(): Promise<void>;
}

export interface RedisSentinelOptions extends RedisOptions {
  /** The master's name. Default `dlm-master`. */
  name?: string;
  /** `sentinel down-after-milliseconds`. Default 1000. */
  downAfterMs?: number;
}

const SENTINELS_ENV = 'DLM_TEST_REDIS_SENTINELS';
const NAME_ENV = 'DLM_TEST_REDIS_SENTINEL_NAME';
const HOST = '127.0.0.1';

function externalSentinels(): SentinelAddress[] | undefined {
  const value = process.env[SENTINELS_ENV]?.trim();
  if (!value) return undefined;
  return value.split(',').map((item) => {
    const [host, port] = item.trim().split(':');
    return { host: host || HOST, port: Number(port || 26379) };
  });
}

/** Whether Sentinel tests can run: the override is set or both binaries are on PATH. */
export function redisSentinelAvailable(): boolean {
  return proc.serviceAvailable(
    'redis-sentinel',
    externalSentinels() !== undefined ||
      (proc.findBinary('redis-server') !== null && proc.findBinary('redis-sentinel') !== null),
  );
}

/** Whether the master can be killed (false against the user's deployment). */
export function redisSentinelManaged(): boolean {
  return externalSentinels() === undefined;
}

/** The bulk strings of a RESP reply, in order (enough for SENTINEL and INFO replies). */
function bulkStrings(reply: string): string[] {
  const out: string[] = [];
  const re = /\$(\d+)\r\n/g;
  for (let match = re.exec(reply); match; match = re.exec(reply)) {
    const start = match.index + match[0].length;
    out.push(reply.slice(start, start + Number(match[1])));
    re.lastIndex = start + Number(match[1]);
  }
  return out;
}

/** Whether a RESP reply is complete (every announced bulk string has arrived). */
function complete(reply: string): boolean {
  if (!reply.includes('\r\n')) return false;
  if (/^[-+:]|^\$-1\r\n/.test(reply)) return true;
  const header = /^\*(-?\d+)\r\n/.exec(reply);
  const wanted = header ? Number(header[1]) : 1;
  if (wanted < 0) return true;
  // A flat array of bulk strings, or one bulk string.
  return bulkStrings(reply).length >= wanted && reply.endsWith('\r\n');
}

/** Sends one inline command over a raw socket; the reply's text, or undefined on failure. */
export function redisQuery(
  address: SentinelAddress,
  command: string,
  timeoutMs = 1_000,
): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ host: address.host, port: address.port });
    let reply = '';
    const done = (text: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(text);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    socket.on('connect', () => socket.write(`${command}\r\n`));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (complete(reply)) done(reply);
    });
    socket.on('error', () => done(undefined));
    socket.on('close', () => done(undefined));
  });
}

/** What one sentinel says of the master: its address and how many peers it knows. */
async function sentinelView(sentinel: SentinelAddress, name: string) {
  const reply = await redisQuery(sentinel, `SENTINEL MASTER ${name}`);
  if (reply === undefined || reply.startsWith('-')) return undefined;
  const fields = bulkStrings(reply);
  const get = (key: string) => fields[fields.indexOf(key) + 1];
  return {
    port: Number(get('port')),
    host: get('ip') ?? HOST,
    master: get('flags') === 'master',
    replicas: Number(get('num-slaves')),
    sentinels: Number(get('num-other-sentinels')),
  };
}

const hostPortsOf = (sentinels: SentinelAddress[]) =>
  sentinels.map(({ host, port }) => `${host}:${port}`).join(',');

const serverArgsOf = (sentinels: SentinelAddress[], name: string) => [
  '--backend',
  'redis',
  '--redis-sentinels',
  hostPortsOf(sentinels),
  '--redis-sentinel-name',
  name,
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls the sentinels until they all name one healthy master (other than `notPort`) and,
 * with `full`, each knows `replicas` replicas and the others; the master's address.
 */
async function agreedMaster(
  sentinels: SentinelAddress[],
  name: string,
  timeoutMs: number,
  want: { notPort?: number; full?: { replicas: number } },
): Promise<SentinelAddress> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    const views = await Promise.all(sentinels.map((sentinel) => sentinelView(sentinel, name)));
    last = JSON.stringify(views);
    const first = views[0];
    const agreed =
      first?.master === true &&
      first.port !== want.notPort &&
      views.every((view) => view?.port === first.port && view.master) &&
      (!want.full ||
        views.every(
          (view) =>
            view!.replicas >= want.full!.replicas && view!.sentinels >= sentinels.length - 1,
        ));
    if (agreed) return { host: first.host, port: first.port };
    if (Date.now() > deadline) {
      throw new Error(`the sentinels did not agree on a master within ${timeoutMs} ms: ${last}`);
    }
    await sleep(100);
  }
}

/** Waits until every replica has finished its first sync (`master_link_status:up`). */
async function replicasInSync(replicas: RedisService[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const infos = await Promise.all(
      replicas.map((replica) => redisQuery(replica, 'INFO replication')),
    );
    if (infos.every((info) => info?.includes('master_link_status:up'))) return;
    if (Date.now() > deadline) {
      throw new Error(`the replicas were not in sync within ${timeoutMs} ms: ${infos.join(' | ')}`);
    }
    await sleep(50);
  }
}

/** One redis-sentinel process monitoring `master`, with its own config file (it rewrites it). */
async function startSentinel(
  master: RedisService,
  name: string,
  downAfterMs: number,
): Promise<{ address: SentinelAddress; process: proc.ManagedProcess }> {
  const binary = proc.findBinary('redis-sentinel');
  if (!binary) throw new Error('redis-sentinel is not on PATH (apt-get install redis-sentinel)');
  const port = await proc.freePort();
  const dir = proc.tempDir('redis-sentinel');
  const file = join(dir, 'sentinel.conf');
  writeFileSync(
    file,
    [
      `port ${port}`,
      `bind ${HOST}`,
      `dir ${dir}`,
      `sentinel monitor ${name} ${master.host} ${master.port} 2`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} 5000`,
      `sentinel parallel-syncs ${name} 2`,
      '',
    ].join('\n'),
  );
  const address = { host: HOST, port };
  const process = await proc.startProcess({
    name: `redis-sentinel:${port}`,
    command: binary,
    args: [file],
    cwd: dir,
    ready: async () => (await redisQuery(address, 'PING'))?.startsWith('+PONG') ?? false,
  });
  return { address, process };
}

function externalDeployment(sentinels: SentinelAddress[], name: string): RedisSentinelService {
  const refuse = (): never => {
    throw new Error(`killMaster: not supported against ${SENTINELS_ENV}: it is not ours to kill`);
  };
  return {
    name,
    sentinels,
    hostPorts: hostPortsOf(sentinels),
    serverArgs: serverArgsOf(sentinels, name),
    servers: [],
    sentinelProcesses: [],
    external: true,
    master: (timeoutMs = 10_000) => agreedMaster(sentinels, name, timeoutMs, {}),
    killMaster: async () => refuse(),
    failedOver: (old, timeoutMs = 30_000) =>
      agreedMaster(sentinels, name, timeoutMs, { notPort: old.port }),
    stop: async () => {},
  };
}

/**
 * Starts the master, its two replicas and three sentinels; resolves once the sentinels agree.
 *
 * @example
 * const sentinel = await startRedisSentinel();
 * afterAll(() => sentinel.stop());
 * const backend = redisBackend({ sentinels: sentinel.sentinels, sentinelName: sentinel.name });
 * const old = await sentinel.master();
 * await sentinel.killMaster();
 * await sentinel.failedOver(old);
 */
export async function startRedisSentinel(
  options: RedisSentinelOptions = {},
): Promise<RedisSentinelService> {
  const name = options.name ?? (process.env[NAME_ENV]?.trim() || 'dlm-master');
  const external = externalSentinels();
  if (external) return externalDeployment(external, name);

  const master = await startRedisProcess(options);
  const replicaArgs = ['--replicaof', master.host, String(master.port), ...(options.args ?? [])];
  const replicas = await proc
    .allStarted(
      [1, 2].map(() => startRedisProcess({ ...options, args: replicaArgs })),
      (replica) => replica.kill(),
    )
    .catch(async (error: unknown) => {
      await master.kill();
      throw error;
    });
  const servers = [master, ...replicas];
  const stopServers = () => Promise.all(servers.map((server) => server.kill()));
  const started = await proc
    .allStarted(
      [0, 1, 2].map(() => startSentinel(master, name, options.downAfterMs ?? 1_000)),
      (sentinel) => sentinel.process.kill(),
    )
    .catch(async (error: unknown) => {
      await stopServers();
      throw error;
    });
  const sentinels = started.map((sentinel) => sentinel.address);
  const sentinelProcesses = started.map((sentinel) => sentinel.process);
  const stop = async () => {
    await Promise.all(sentinelProcesses.map((sentinel) => sentinel.kill()));
    await stopServers();
  };
  try {
    await agreedMaster(sentinels, name, 30_000, { full: { replicas: replicas.length } });
    await replicasInSync(replicas, 30_000);
  } catch (error) {
    await stop();
    throw error;
  }
  const current = (timeoutMs = 10_000) => agreedMaster(sentinels, name, timeoutMs, {});
  return {
    name,
    sentinels,
    hostPorts: hostPortsOf(sentinels),
    serverArgs: serverArgsOf(sentinels, name),
    servers,
    sentinelProcesses,
    external: false,
    master: current,
    async killMaster() {
      const { port } = await current();
      const server = servers.find((candidate) => candidate.port === port);
      if (!server) throw new Error(`the sentinels name a master on ${port}, not one of ours`);
      await server.kill();
      return server;
    },
    failedOver: (old, timeoutMs = 30_000) =>
      agreedMaster(sentinels, name, timeoutMs, { notPort: old.port }),
    stop,
  };
}
