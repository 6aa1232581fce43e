#!/usr/bin/env node
/**
 * What each backend keeps after many unique names were locked and released, and how long it
 * takes to go back to what it held before: lock `--names` fresh names once each (acquire,
 * then release, `--concurrency` at a time), then read the backend's own counts (Redis keys,
 * each Redlock node's keys, etcd keys / revision / db size, ZooKeeper name nodes / znodes,
 * the embedded backend's journal bytes and heap) right after the last release and every
 * `--poll-ms` until they are back at their baseline or `--settle-ms` has passed.
 *
 *   node apps/bench/dist/residue.js --names 100000 --adapter all
 */
import { readdirSync, statSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { embeddedBackend } from '@dlm/adapter-embedded';
import { etcdBackend } from '@dlm/adapter-etcd';
import { redisBackend } from '@dlm/adapter-redis';
import { redlockBackend } from '@dlm/adapter-redlock';
import { zookeeperBackend } from '@dlm/adapter-zookeeper';
import type { LockBackend } from '@dlm/core';
import { parseFlags, parseInteger, UsageError } from '@dlm/flags';
import {
  startEtcd,
  startRedis,
  startRedisNodes,
  startZooKeeper,
  tempDir,
} from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import zookeeper from 'node-zookeeper-client';

export const RESIDUE_ADAPTERS = [
  'embedded-memory',
  'embedded-data-dir',
  'redis',
  'redlock',
  'etcd',
  'zookeeper',
] as const;
export type ResidueAdapter = (typeof RESIDUE_ADAPTERS)[number];

/** One reading of what the backend holds: named counts. */
export type Reading = Record<string, number>;

export interface ResidueOptions {
  names: number;
  ttlMs: number;
  concurrency: number;
  /** How long to keep reading after the last release. */
  settleMs: number;
  pollMs: number;
  /** Redis and Redlock: the fence keys' retention. */
  fenceRetentionMs: number;
  /** ZooKeeper: the sweep interval. */
  sweepIntervalMs: number;
  /** Embedded with a data dir: the journal's compaction threshold (default the adapter's). */
  compactAfterBytes?: number;
}

export interface ResidueResult {
  adapter: ResidueAdapter;
  names: number;
  /** Before any name was locked. */
  baseline: Reading;
  /** Right after the last release. */
  afterRelease: Reading;
  /** The last reading (back at the baseline, or when `settleMs` ran out). */
  settled: Reading;
  /** From the last release until every count that `returns` names was back at its baseline; undefined: not within `settleMs`. */
  returnedAfterMs: number | undefined;
  /** The counts expected to return to the baseline (others are reported only). */
  returns: string[];
  lockMs: number;
  notes: string[];
}

interface Probe {
  backend: LockBackend;
  read(): Promise<Reading>;
  returns: string[];
  notes: string[];
  /** Something to run once after the last release (a compaction), before reading on. */
  afterRelease?(): Promise<void>;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? dirBytes(path) : statSync(path).size;
  }
  return total;
}

function heapBytes(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  return process.memoryUsage().heapUsed;
}

/** ZooKeeper's own count of every znode (`srvr`, one of the whitelisted four-letter words). */
function zkNodeCount(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = createConnection({ host: '127.0.0.1', port }, () => socket.write('srvr'));
    socket.setTimeout(5_000, () => socket.destroy(new Error('srvr timed out')));
    socket.on('data', (chunk) => {
      text += chunk.toString();
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const match = /Node count: (\d+)/.exec(text);
      if (match) resolve(Number(match[1]));
      else reject(new Error(`no node count in srvr: ${text}`));
    });
  });
}

/** The embedded backend in memory: what it lists, and the heap. */
async function embeddedMemoryProbe(): Promise<Probe> {
  const backend = await embeddedBackend();
  return {
    backend,
    read: async () => ({
      heldListed: (await backend.list!('')).length,
      heapKiB: Math.round(heapBytes() / 1024),
    }),
    returns: ['heldListed'],
    notes: ['heap is the whole process (run with --expose-gc for a collected heap)'],
    stop: () => backend.close(),
  };
}

/** The embedded backend on a data dir: what it lists, and the journal on disk. */
async function embeddedDataDirProbe(options: ResidueOptions): Promise<Probe> {
  const dataDir = tempDir('residue-embedded');
  const backend = await embeddedBackend({
    dataDir,
    ...(options.compactAfterBytes ? { compactAfterBytes: options.compactAfterBytes } : {}),
  });
  return {
    backend,
    read: async () => ({
      heldListed: (await backend.list!('')).length,
      dataDirBytes: dirBytes(dataDir),
    }),
    returns: ['heldListed'],
    notes: [
      `the journal grows until compactAfterBytes (${options.compactAfterBytes ?? '64 MiB by default'}, or 4 × the last snapshot), then is rewritten as a snapshot of what is held`,
    ],
    stop: () => backend.close(),
  };
}

/** One Redis: its key count. */
async function redisProbe(options: ResidueOptions): Promise<Probe> {
  const redis = await startRedis({ aof: false });
  const backend = redisBackend({ url: redis.url, fenceRetentionMs: options.fenceRetentionMs });
  await backend.ready();
  const raw = new Redis(redis.url);
  return {
    backend,
    read: async () => ({ keys: await raw.dbsize() }),
    returns: ['keys'],
    notes: [],
    async stop() {
      await backend.close();
      raw.disconnect();
      await redis.stop(1_000);
    },
  };
}

/** Three Redis nodes: the key count of each. */
async function redlockProbe(options: ResidueOptions): Promise<Probe> {
  const nodes = await startRedisNodes(3);
  const backend = redlockBackend({
    urls: nodes.map((node) => node.url),
    fenceRetentionMs: options.fenceRetentionMs,
  });
  await backend.ready();
  const raws = nodes.map((node) => new Redis(node.url));
  return {
    backend,
    read: async () =>
      Object.fromEntries(
        await Promise.all(raws.map(async (raw, i) => [`keys@r${i + 1}`, await raw.dbsize()])),
      ),
    returns: nodes.map((_, i) => `keys@r${i + 1}`),
    notes: [],
    async stop() {
      await backend.close();
      for (const raw of raws) raw.disconnect();
      await Promise.all(nodes.map((node) => node.stop(1_000)));
    },
  };
}

/** One etcd member: the name keys, the revision and the database size. */
async function etcdProbe(): Promise<Probe> {
  const etcd = await startEtcd();
  const backend = etcdBackend({ endpoints: etcd.endpoints });
  const client = new Etcd3({ hosts: etcd.endpoints });
  return {
    backend,
    read: async () => {
      const status = await client.maintenance.status();
      return {
        // Per name: the lock key and the waiters' queue keys; `dlm/event` is one marker key
        // per deployment, counted apart.
        nameKeys:
          (await client.getAll().prefix('dlm/lock/').count()) +
          (await client.getAll().prefix('dlm/queue/').count()),
        otherKeys: await client.getAll().prefix('dlm/event').count(),
        revision: Number(status.header.revision),
        dbSizeKiB: Math.round(Number(status.dbSize) / 1024),
      };
    },
    returns: ['nameKeys'],
    notes: [
      'etcd keeps every revision until it is compacted (etcd --auto-compaction-retention, or a compaction by the operator); the row after the compaction shows what remains then',
    ],
    async afterRelease() {
      const status = await client.maintenance.status();
      await client.kv.compact({ revision: status.header.revision, physical: true });
      await client.maintenance.defragment();
    },
    async stop() {
      await backend.close();
      client.close();
      await etcd.stop();
    },
  };
}

/** One ZooKeeper: the name nodes, and its own count of every znode. */
async function zookeeperProbe(options: ResidueOptions): Promise<Probe> {
  const zk = await startZooKeeper();
  const member = zk.members[0];
  const backend = zookeeperBackend({
    connect: zk.connectString,
    sweepIntervalMs: options.sweepIntervalMs,
  });
  const raw = zookeeper.createClient(zk.connectString);
  raw.connect();
  const children = (path: string) =>
    new Promise<number>((resolve, reject) =>
      raw.getChildren(path, (error, list) => {
        if (error && 'getCode' in error && error.getCode() === zookeeper.Exception.NO_NODE) {
          resolve(0);
        } else if (error) reject(error);
        else resolve(list.length);
      }),
    );
  return {
    backend,
    read: async () => ({
      nameNodes: await children('/dlm/locks'),
      ...(member ? { znodes: await zkNodeCount(member.clientPort) } : {}),
    }),
    returns: ['nameNodes'],
    notes: [
      `a name node stays until a sweep finds it unused for a whole sweepIntervalMs (${options.sweepIntervalMs} ms here, sweeps every 0.5–1.5 × that, each reading every name node, 16 at a time): back within 2.5 × sweepIntervalMs plus one sweep's duration`,
    ],
    async stop() {
      await backend.close();
      raw.close();
      await zk.stop();
    },
  };
}

async function probe(adapter: ResidueAdapter, options: ResidueOptions): Promise<Probe> {
  switch (adapter) {
    case 'embedded-memory':
      return embeddedMemoryProbe();
    case 'embedded-data-dir':
      return embeddedDataDirProbe(options);
    case 'redis':
      return redisProbe(options);
    case 'redlock':
      return redlockProbe(options);
    case 'etcd':
      return etcdProbe();
    case 'zookeeper':
      return zookeeperProbe(options);
  }
}

/** Locks and releases `options.names` fresh names on `adapter`, and reads what stays. */
export async function measureResidue(
  adapter: ResidueAdapter,
  options: ResidueOptions,
  log: (line: string) => void = () => {},
): Promise<ResidueResult> {
  const target = await probe(adapter, options);
  try {
    const { backend } = target;
    const baseline = await target.read();
    const run = `residue-${process.pid}-${Date.now().toString(36)}`;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        for (;;) {
          const i = next++;
          if (i >= options.names) return;
          const name = `${run}/order:${i}`;
          const result = await backend.tryAcquire({ name, owner: `o${i}`, ttlMs: options.ttlMs });
          if (!result.granted) throw new Error(`${name} was not granted`);
          await backend.release({ name, token: result.grant.token });
          if (i > 0 && i % 10_000 === 0) log(`${adapter}: ${i} names`);
        }
      }),
    );
    const lockMs = performance.now() - started;
    const releasedAt = performance.now();
    const afterRelease = await target.read();
    log(`${adapter}: after release ${JSON.stringify(afterRelease)}`);
    await target.afterRelease?.();
    const back = (reading: Reading) =>
      target.returns.every((key) => (reading[key] ?? 0) <= (baseline[key] ?? 0));
    let settled = afterRelease;
    let returnedAfterMs: number | undefined = back(afterRelease) ? 0 : undefined;
    while (returnedAfterMs === undefined && performance.now() - releasedAt < options.settleMs) {
      await sleep(options.pollMs);
      settled = await target.read();
      if (back(settled)) returnedAfterMs = performance.now() - releasedAt;
    }
    if (returnedAfterMs === 0) settled = await target.read();
    return {
      adapter,
      names: options.names,
      baseline,
      afterRelease,
      settled,
      returnedAfterMs,
      returns: target.returns,
      lockMs,
      notes: target.notes,
    };
  } finally {
    await target.stop();
  }
}

function row(result: ResidueResult): string {
  const show = (reading: Reading) =>
    Object.entries(reading)
      .map(([key, value]) => `${key} ${value}`)
      .join(', ');
  const back =
    result.returnedAfterMs === undefined
      ? 'not within the settle time'
      : `${(result.returnedAfterMs / 1000).toFixed(1)} s`;
  return `| ${result.adapter} | ${result.names} | ${show(result.baseline)} | ${show(result.afterRelease)} | ${show(result.settled)} | ${back} (${result.returns.join(', ')}) | ${Math.round(result.lockMs / 1000)} s |`;
}

/** The adapters to measure and the options, from the flags. @throws UsageError */
function residueArgs(argv: string[]): { adapters: ResidueAdapter[]; options: ResidueOptions } {
  const { values } = parseFlags(argv, {
    names: { type: 'string', default: '100000' },
    adapter: { type: 'string', default: 'all' },
    'ttl-ms': { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '32' },
    'settle-ms': { type: 'string', default: '120000' },
    'poll-ms': { type: 'string', default: '500' },
    'fence-retention-ms': { type: 'string', default: '60000' },
    'sweep-interval-ms': { type: 'string', default: '20000' },
  });
  const number = (text: string, flag: string) => parseInteger(text, `--${flag}`);
  const adapters =
    values.adapter === 'all'
      ? [...RESIDUE_ADAPTERS]
      : (values.adapter.split(',') as ResidueAdapter[]);
  for (const adapter of adapters) {
    if (!RESIDUE_ADAPTERS.includes(adapter)) {
      throw new UsageError(
        `unknown adapter ${JSON.stringify(adapter)} (${RESIDUE_ADAPTERS.join(', ')})`,
      );
    }
  }
  const options: ResidueOptions = {
    names: number(values.names, 'names'),
    ttlMs: number(values['ttl-ms'], 'ttl-ms'),
    concurrency: number(values.concurrency, 'concurrency'),
    settleMs: number(values['settle-ms'], 'settle-ms'),
    pollMs: number(values['poll-ms'], 'poll-ms'),
    fenceRetentionMs: number(values['fence-retention-ms'], 'fence-retention-ms'),
    sweepIntervalMs: number(values['sweep-interval-ms'], 'sweep-interval-ms'),
  };
  return { adapters, options };
}

async function main(): Promise<void> {
  let args: ReturnType<typeof residueArgs>;
  try {
    args = residueArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`residue: ${error.message}\n`);
    process.exit(2);
  }
  const { adapters, options } = args;
  const log = (line: string) => process.stderr.write(`[residue] ${line}\n`);
  process.stdout.write(
    `| adapter | names | before | right after the last release | settled | back to the baseline after | locking took |\n|---|--:|---|---|---|---|--:|\n`,
  );
  for (const adapter of adapters) {
    const result = await measureResidue(adapter, options, log);
    process.stdout.write(`${row(result)}\n`);
    for (const note of result.notes) log(`${adapter}: ${note}`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
