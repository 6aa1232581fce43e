import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import * as proc from './process.js';
import { pingRedis, redisServerArgs } from './redis.js';

/**
 * A Redis Cluster for tests: 3 masters and 3 replicas of redis-server (`cluster-enabled yes`) on
 * free loopback ports, joined with `redis-cli --cluster create … --cluster-replicas 1`, and
 * helpers to kill a master (the cluster promotes its replica) and to move a hash slot from one
 * master to another (clients then meet `ASK` while it moves and `MOVED` after).
 */

export interface RedisClusterNode {
  readonly host: string;
  readonly port: number;
  /** `host:port`, as `redis-cli` and cluster clients name it. */
  readonly address: string;
  readonly dir: string;
  readonly process: proc.ManagedProcess;
}

/** One node as `CLUSTER NODES` describes it now. */
export interface RedisClusterNodeInfo {
  readonly id: string;
  readonly port: number;
  readonly role: 'master' | 'replica';
  /** The master's id, for a replica. */
  readonly masterId: string | undefined;
  /** Whether the others mark it failed (`fail` or `fail?`). */
  readonly failed: boolean;
  /** Slot ranges it serves, `[first, last]` inclusive (masters only). */
  readonly slots: Array<[number, number]>;
}

export interface SlotMigration {
  /** Moves the slot's keys (`MIGRATE`); the slot is still the source's until `finish`. */
  moveKeys(): Promise<number>;
  /** Gives the slot to the target on every node (`CLUSTER SETSLOT … NODE`). */
  finish(): Promise<void>;
}

export interface RedisClusterService {
  readonly nodes: RedisClusterNode[];
  /** `host:port` of every node, for `redisClusterBackend({ nodes })` or `--redis-cluster`. */
  readonly addresses: string[];
  /** The cluster's view (asked of a running node). */
  topology(): Promise<RedisClusterNodeInfo[]>;
  /** The hash slot of `key` (`CLUSTER KEYSLOT`). */
  slotOf(key: string): Promise<number>;
  /** The node that serves `slot` as master now. */
  masterOf(slot: number): Promise<RedisClusterNode>;
  /** SIGKILLs the master of `slot` and returns it; `waitUntilOk()` then waits for the failover. */
  killMaster(slot: number): Promise<RedisClusterNode>;
  /**
   * Resolves once every running node says `cluster_state:ok`, every slot has a running master,
   * and (`replicasInSync`, default true) every running replica's link to its master is up.
   */
  waitUntilOk(timeoutMs?: number, replicasInSync?: boolean): Promise<void>;
  /**
   * Marks `slot` migrating from its master to `to` (importing there). Until `finish`, clients
   * asking the source for a key already moved are told `ASK`; after it, `MOVED`.
   */
  beginSlotMigration(slot: number, to: RedisClusterNode): Promise<SlotMigration>;
  /** `beginSlotMigration`, `moveKeys` and `finish` in one. */
  migrateSlot(slot: number, to: RedisClusterNode): Promise<void>;
  /** Kills every node. Safe to call twice. */
  stop(): Promise<void>;
}

export interface RedisClusterOptions {
  /** `cluster-node-timeout`, ms: how long a master may be silent before its replica takes over. Default 1000. */
  nodeTimeoutMs?: number;
  /** More redis-server arguments for every node. */
  args?: string[];
}

const HOST = '127.0.0.1';
/** The cluster bus listens on port + 10000, so a node's port must leave room for it. */
const BUS_OFFSET = 10_000;
const MAX_PORT = 65_535 - BUS_OFFSET;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether redis-server and redis-cli are installed (CI=true: a missing one throws). */
export function redisClusterAvailable(): boolean {
  return proc.serviceAvailable(
    'redis-server and redis-cli',
    proc.findBinary('redis-server') !== null && proc.findBinary('redis-cli') !== null,
  );
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, HOST, () => server.close(() => resolve(true)));
  });
}

/** A free port whose cluster-bus port (port + 10000) is free too. */
async function clusterPort(taken: Set<number>): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = await proc.freePort();
    if (port > MAX_PORT || taken.has(port) || taken.has(port + BUS_OFFSET)) continue;
    if (await portFree(port + BUS_OFFSET)) {
      taken.add(port);
      taken.add(port + BUS_OFFSET);
      return port;
    }
  }
  throw new Error(`no free port ≤ ${MAX_PORT} with its cluster-bus port free`);
}

/** Runs `redis-cli -p port …` and resolves with what it printed (rejects on a non-zero exit). */
export function redisCli(port: number, args: string[], timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'redis-cli',
      ['-h', HOST, '-p', String(port), ...args],
      { timeout: timeoutMs, encoding: 'utf8' },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`redis-cli ${args.join(' ')}: ${stderr || error.message}`));
        else if (/^(ERR|CLUSTERDOWN|MOVED|ASK|TRYAGAIN|IOERR)\b/.test(stdout)) {
          reject(new Error(`redis-cli -p ${port} ${args.join(' ')}: ${stdout.trim()}`));
        } else resolve(stdout);
      },
    );
  });
}

/** Parses `CLUSTER NODES`. */
export function parseClusterNodes(text: string): RedisClusterNodeInfo[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => {
      const [id = '', address = '', flags = '', master = '-', , , , , ...slots] = line.split(' ');
      const port = Number(address.split('@')[0]?.split(':')[1]);
      const flagSet = new Set(flags.split(','));
      return {
        id,
        port,
        role: flagSet.has('master') ? 'master' : 'replica',
        masterId: master === '-' ? undefined : master,
        failed: flagSet.has('fail') || flagSet.has('fail?'),
        slots: slots
          .filter((slot) => !slot.startsWith('['))
          .map((slot): [number, number] => {
            const [first, last = first] = slot.split('-').map(Number);
            return [first ?? 0, last ?? first ?? 0];
          }),
      } satisfies RedisClusterNodeInfo;
    });
}

async function startNode(
  port: number,
  root: string,
  options: RedisClusterOptions,
): Promise<RedisClusterNode> {
  const dir = join(root, String(port));
  mkdirSync(dir);
  const args = redisServerArgs(HOST, port, dir, {
    args: [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(dir, 'nodes.conf'),
      '--cluster-node-timeout',
      String(options.nodeTimeoutMs ?? 1_000),
      ...(options.args ?? []),
    ],
  });
  const managed = await proc.startProcess({
    name: `redis-server(cluster):${port}`,
    command: 'redis-server',
    args,
    cwd: dir,
    ready: () => pingRedis(HOST, port),
  });
  return { host: HOST, port, address: `${HOST}:${port}`, dir, process: managed };
}

/** What `info` says for `field` (`cluster_state`, `master_link_status`, …). */
function infoField(text: string, field: string): string | undefined {
  const match = new RegExp(`^${field}:(.*)$`, 'm').exec(text);
  return match?.[1]?.trim();
}

/** `cluster_state:ok` on `node`, and (`replicasInSync`) its master link up if it is a replica. */
async function nodeOk(node: RedisClusterNode, replicasInSync: boolean): Promise<boolean> {
  const state = infoField(await redisCli(node.port, ['cluster', 'info']), 'cluster_state');
  if (state !== 'ok') return false;
  if (!replicasInSync) return true;
  const replication = await redisCli(node.port, ['info', 'replication']);
  return (
    infoField(replication, 'role') !== 'slave' ||
    infoField(replication, 'master_link_status') === 'up'
  );
}

/**
 * Moves `slot` from `source` to `to` in steps (see `beginSlotMigration`); `masters` lists the
 * running masters at the time.
 */
async function slotMigration(
  slot: number,
  source: RedisClusterNode,
  to: RedisClusterNode,
  masters: () => Promise<RedisClusterNode[]>,
): Promise<SlotMigration> {
  if (source === to) throw new Error(`slot ${slot} is already on ${to.address}`);
  const id = async (node: RedisClusterNode) =>
    (await redisCli(node.port, ['cluster', 'myid'])).trim();
  const [sourceId, targetId] = await Promise.all([id(source), id(to)]);
  // Importing first: the other order lets a client be sent (ASK) to a node that refuses.
  await redisCli(to.port, ['cluster', 'setslot', String(slot), 'importing', sourceId]);
  await redisCli(source.port, ['cluster', 'setslot', String(slot), 'migrating', targetId]);
  return {
    async moveKeys() {
      let moved = 0;
      for (;;) {
        const keys = (
          await redisCli(source.port, ['cluster', 'getkeysinslot', String(slot), '100'])
        )
          .split('\n')
          .filter(Boolean);
        if (keys.length === 0) return moved;
        await redisCli(source.port, [
          'migrate',
          to.host,
          String(to.port),
          '',
          '0',
          '5000',
          'KEYS',
          ...keys,
        ]);
        moved += keys.length;
      }
    },
    async finish() {
      // The target first, then the source, then the other masters (as redis-cli --cluster
      // does; replicas refuse SETSLOT and learn it from their masters).
      const others = (await masters()).filter((node) => node !== to && node !== source);
      for (const node of [to, source, ...others]) {
        await redisCli(node.port, ['cluster', 'setslot', String(slot), 'node', targetId]);
      }
    },
  };
}

function clusterService(nodes: RedisClusterNode[]): RedisClusterService {
  const running = () => nodes.filter((node) => node.process.running);
  const byPort = (port: number) => {
    const node = nodes.find((candidate) => candidate.port === port);
    if (!node) throw new Error(`no node of this cluster on port ${port}`);
    return node;
  };

  async function topology(): Promise<RedisClusterNodeInfo[]> {
    let lastError: unknown;
    for (const node of running()) {
      try {
        return parseClusterNodes(await redisCli(node.port, ['cluster', 'nodes']));
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no running cluster node answers CLUSTER NODES: ${String(lastError)}`);
  }

  async function masterInfo(slot: number): Promise<RedisClusterNodeInfo | undefined> {
    return (await topology()).find(
      (info) =>
        info.role === 'master' &&
        !info.failed &&
        info.slots.some(([first, last]) => slot >= first && slot <= last),
    );
  }

  async function masterOf(slot: number): Promise<RedisClusterNode> {
    const info = await masterInfo(slot);
    if (!info) throw new Error(`no master serves slot ${slot} now`);
    return byPort(info.port);
  }

  async function allSlotsServed(): Promise<boolean> {
    const live = new Set(running().map((node) => node.port));
    const covered = (await topology())
      .filter((info) => info.role === 'master' && live.has(info.port))
      .reduce((sum, info) => sum + info.slots.reduce((n, [a, b]) => n + b - a + 1, 0), 0);
    return covered === 16_384;
  }

  async function waitUntilOk(timeoutMs = 30_000, replicasInSync = true): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ok = await Promise.all(running().map((node) => nodeOk(node, replicasInSync)))
        .then(async (answers) => answers.every(Boolean) && (await allSlotsServed()))
        .catch(() => false);
      if (ok) return;
      if (Date.now() > deadline) {
        throw new Error(`the Redis Cluster did not reach cluster_state:ok within ${timeoutMs} ms`);
      }
      await sleep(100);
    }
  }

  const beginSlotMigration = async (slot: number, to: RedisClusterNode) =>
    slotMigration(slot, await masterOf(slot), to, async () => {
      const masters = new Set(
        (await topology()).filter((info) => info.role === 'master').map((info) => info.port),
      );
      return running().filter((node) => masters.has(node.port));
    });

  return {
    nodes,
    addresses: nodes.map((node) => node.address),
    topology,
    async slotOf(key) {
      return Number((await redisCli(running()[0]!.port, ['cluster', 'keyslot', key])).trim());
    },
    masterOf,
    async killMaster(slot) {
      const master = await masterOf(slot);
      await master.process.kill();
      return master;
    },
    waitUntilOk,
    beginSlotMigration,
    async migrateSlot(slot, to) {
      const migration = await beginSlotMigration(slot, to);
      await migration.moveKeys();
      await migration.finish();
    },
    async stop() {
      await Promise.all(nodes.map((node) => node.process.kill()));
    },
  };
}

/**
 * Six redis-servers (3 masters, 3 replicas) joined into one cluster on free loopback ports.
 * Resolves once every node says `cluster_state:ok` and every replica is in sync with its master.
 *
 * @example
 * const cluster = await startRedisCluster();
 * afterAll(() => cluster.stop());
 * const backend = redisClusterBackend({ nodes: cluster.addresses });
 */
export async function startRedisCluster(
  options: RedisClusterOptions = {},
): Promise<RedisClusterService> {
  if (!proc.findBinary('redis-server') || !proc.findBinary('redis-cli')) {
    throw new Error('redis-server and redis-cli are not on PATH (apt-get install redis-server)');
  }
  const root = proc.tempDir('redis-cluster');
  const taken = new Set<number>();
  const ports: number[] = [];
  for (let i = 0; i < 6; i++) ports.push(await clusterPort(taken));
  const nodes = await proc.allStarted(
    ports.map((port) => startNode(port, root, options)),
    (node) => node.process.kill(),
  );
  const service = clusterService(nodes);
  try {
    await redisCli(
      nodes[0]!.port,
      ['--cluster', 'create', ...service.addresses, '--cluster-replicas', '1', '--cluster-yes'],
      60_000,
    );
    await service.waitUntilOk(60_000);
  } catch (error) {
    await service.stop();
    throw error;
  }
  return service;
}
