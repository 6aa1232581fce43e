import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { call, connectZooKeeper } from './lockers/zookeeper-connection.js';
import { createSamples, type LatencySummary, median } from './stats.js';
import type { Services } from './targets.js';

/**
 * A backend's floor (issue 21, target 4): its own plain write at workload 2's concurrency
 * (`clients` writers, each on its own connection, for the same window), through its own client.
 * A lock on that backend cannot be granted faster than one such write, so "acquire p99 ÷ floor
 * p99" says how much of dlm's p99 is dlm's own.
 */

export type FloorBackend = 'etcd' | 'zookeeper' | 'disk';

/** What each floor writes, as the report states it. */
export const FLOOR_WRITES: Readonly<Record<FloorBackend, string>> = {
  etcd: 'etcd3 `client.put(key).value(v)`, one Etcd3 client per writer, each on its own key',
  zookeeper: 'node-zookeeper-client `setData` of its own znode (16 bytes), one session per writer',
  disk: "append of 64 bytes to one file, then that writer's own `fdatasync` (not group-committed; Node fs on the libuv pool)",
};

export interface FloorOptions {
  clients: number;
  durationMs: number;
  warmupMs: number;
  /** Keys and znodes distinct from any other run's. */
  runId: string;
}

export interface FloorResult {
  backend: FloorBackend;
  clients: number;
  writes: number;
  writesPerSecond: number;
  latency: LatencySummary;
  errors: number;
  firstError?: string;
}

/** One write per call, each writer's own; `close` ends every connection. */
interface Writers {
  writes: Array<() => Promise<void>>;
  close(): Promise<void>;
}

async function etcdWriters(endpoints: string[], options: FloorOptions): Promise<Writers> {
  const clients = Array.from({ length: options.clients }, () => new Etcd3({ hosts: endpoints }));
  // The first call opens the gRPC channel; do it before anything is timed.
  await Promise.all(clients.map((client) => client.get('bench/warmup').string()));
  return {
    writes: clients.map((client, i) => {
      const key = `bench/floor/${options.runId}/${i}`;
      return async () => {
        await client.put(key).value('x');
      };
    }),
    async close() {
      for (const client of clients) client.close();
    },
  };
}

async function zookeeperWriters(connect: string, options: FloorOptions): Promise<Writers> {
  const clients = await Promise.all(
    Array.from({ length: options.clients }, () => connectZooKeeper(connect)),
  );
  const parent = `/bench-floor-${options.runId}`;
  await call<string>((cb) => clients[0]!.mkdirp(parent, cb));
  const data = Buffer.alloc(16, 'x');
  const paths = clients.map((_, i) => `${parent}/w${i}`);
  await Promise.all(paths.map((path) => call<string>((cb) => clients[0]!.mkdirp(path, cb))));
  return {
    writes: clients.map((client, i) => async () => {
      await call<unknown>((cb) => client.setData(paths[i]!, data, -1, cb));
    }),
    async close() {
      for (const client of clients) client.close();
    },
  };
}

async function diskWriters(options: FloorOptions): Promise<Writers> {
  const handle = await open(join(tempDir('bench-floor'), 'append.log'), 'a');
  const record = Buffer.alloc(64, 'x');
  const write = async () => {
    await handle.write(record);
    await handle.datasync();
  };
  return {
    writes: Array.from({ length: options.clients }, () => write),
    close: () => handle.close(),
  };
}

function openWriters(
  backend: FloorBackend,
  services: Services,
  options: FloorOptions,
): Promise<Writers> {
  switch (backend) {
    case 'etcd':
      if (!services.etcd) throw new Error('the etcd floor needs etcd');
      return etcdWriters(services.etcd.endpoints, options);
    case 'zookeeper':
      if (!services.zookeeper) throw new Error('the ZooKeeper floor needs ZooKeeper');
      return zookeeperWriters(services.zookeeper.connectString, options);
    case 'disk':
      return diskWriters(options);
  }
}

/** Every writer writes in a loop; only writes that start and end inside the window count. */
export async function measureFloor(
  backend: FloorBackend,
  services: Services,
  options: FloorOptions,
): Promise<FloorResult> {
  const writers = await openWriters(backend, services, options);
  const latency = createSamples();
  let errors = 0;
  let firstError: string | undefined;
  const windowStart = performance.now() + options.warmupMs;
  const windowEnd = windowStart + options.durationMs;
  const loop = async (write: () => Promise<void>) => {
    for (let t0 = performance.now(); t0 < windowEnd; t0 = performance.now()) {
      try {
        await write();
        const t1 = performance.now();
        if (t0 >= windowStart && t1 <= windowEnd) latency.push(t1 - t0);
      } catch (error) {
        errors += 1;
        firstError ??= error instanceof Error ? error.message : String(error);
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    }
  };
  try {
    await Promise.all(writers.writes.map(loop));
  } finally {
    await writers.close();
  }
  return {
    backend,
    clients: options.clients,
    writes: latency.count,
    writesPerSecond: latency.count / (options.durationMs / 1_000),
    latency: latency.summary(),
    errors,
    ...(firstError === undefined ? {} : { firstError }),
  };
}

/** The figures the report uses, medians over rounds (errors summed). */
export interface FloorFigures {
  writesPerSecond: number;
  p50: number;
  p99: number;
  errors: number;
}

export function combineFloors(runs: FloorResult[]): FloorFigures {
  return {
    writesPerSecond: median(runs.map((run) => run.writesPerSecond)),
    p50: median(runs.map((run) => run.latency.p50)),
    p99: median(runs.map((run) => run.latency.p99)),
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
  };
}
