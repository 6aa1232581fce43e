#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { createClient as CreateClient } from '@dlm/client';
import { parseFlags, parseInteger, UsageError, usageFailure } from '@dlm/flags';
import { tempDir } from '@dlm/test-services';
import { cpuSnapshot } from './cpu.js';
import { allocationSites, SAMPLING } from './heap-sampler.js';
import { startServerProcess } from './server-process.js';

/**
 * What one acquire+release pair costs the client and the embedded server (issue 29, levers
 * "a lean client call path" and "a server fast path"): CPU µs per pair from /proc for both
 * processes, and the client's allocation per pair from V8's sampling heap profiler with the
 * collected objects included (what the GC has to clear, not only what stays). Runs one shape:
 * `clients` (workload 2: a client per caller) or `shared` (workload 5: one client, all callers).
 * `--client-module` and `--server-main` point at other builds, so that before and after run
 * in alternating processes on the same machine. Prints one JSON line.
 *
 *   node apps/bench/dist/pair-cost.js --shape clients --duration-ms 3000 [--heap]
 */

interface Settings {
  shape: 'clients' | 'shared';
  callers: number;
  durationMs: number;
  warmupMs: number;
  heap: boolean;
  top: number;
  clientModule: string | undefined;
  serverMain: string | undefined;
  /** Run the server under `node --cpu-prof`, its profile written here. */
  profileDir: string | undefined;
}

function settingsOf(argv: string[]): Settings {
  const { values } = parseFlags(argv, {
    shape: { type: 'string' },
    callers: { type: 'string' },
    'duration-ms': { type: 'string' },
    'warmup-ms': { type: 'string' },
    heap: { type: 'boolean' },
    top: { type: 'string' },
    'client-module': { type: 'string' },
    'server-main': { type: 'string' },
    'profile-dir': { type: 'string' },
  });
  const shape = values.shape ?? 'clients';
  if (shape !== 'clients' && shape !== 'shared') {
    throw new UsageError(`--shape must be clients or shared, got ${shape}`);
  }
  const integer = (text: string | undefined, fallback: number, flag: string) =>
    text === undefined ? fallback : parseInteger(text, flag);
  return {
    shape,
    callers: integer(values.callers, 32, '--callers'),
    durationMs: integer(values['duration-ms'], 3_000, '--duration-ms'),
    warmupMs: integer(values['warmup-ms'], 1_000, '--warmup-ms'),
    heap: values.heap ?? false,
    top: integer(values.top, 0, '--top'),
    clientModule: values['client-module'],
    serverMain: values['server-main'],
    profileDir: values['profile-dir'],
  };
}

interface PerPair {
  bytes: number;
  top: Array<[string, number]>;
}

function bytesPerPair(sites: Array<[string, number]>, pairs: number, top: number): PerPair {
  const total = sites.reduce((sum, [, bytes]) => sum + bytes, 0);
  return {
    bytes: Math.round(total / pairs),
    top: sites.slice(0, top).map(([site, bytes]) => [site, Math.round(bytes / pairs)]),
  };
}

/** The server's sampled sites, once its heap sampler has written them (within 10 s). */
async function serverSites(file: string): Promise<Array<[string, number]>> {
  for (let waited = 0; waited < 10_000; waited += 50) {
    try {
      return (JSON.parse(readFileSync(file, 'utf8')) as { sites: Array<[string, number]> }).sites;
    } catch {
      await new Promise((done) => setTimeout(done, 50));
    }
  }
  throw new Error(`the server wrote no heap sample to ${file}`);
}

async function run(settings: Settings): Promise<Record<string, unknown>> {
  const module = (await import(
    settings.clientModule ? pathToFileURL(resolve(settings.clientModule)).href : '@dlm/client'
  )) as { createClient: typeof CreateClient };
  const serverHeapOut = join(tempDir('pair-cost'), 'server-heap.json');
  const server = await startServerProcess({
    backendArgs: ['--backend', 'embedded', '--memory'],
    serverMain: settings.serverMain && resolve(settings.serverMain),
    profileDir: settings.profileDir,
    profileName: `pair-cost-server-${process.pid}`,
    ...(settings.heap
      ? {
          nodeArgs: ['--import', new URL('./heap-sampler.js', import.meta.url).href],
          env: { DLM_HEAP_SAMPLER_OUT: serverHeapOut },
        }
      : {}),
  });
  const clientCount = settings.shape === 'shared' ? 1 : settings.callers;
  const clients = Array.from({ length: clientCount }, () =>
    module.createClient({ url: server.url, name: '@dlm/bench' }),
  );
  await Promise.all(clients.map((client) => client.connect()));
  let pairs = 0;
  let counting = false;
  let stop = false;
  const loop = async (index: number) => {
    const client = clients[index % clients.length]!;
    const name = `pair-cost:${index}`;
    while (!stop) {
      const lease = await client.acquire(name, { ttlMs: 10_000 });
      await lease.release();
      if (counting) pairs += 1;
    }
  };
  const loops = Array.from({ length: settings.callers }, (_, i) => loop(i));
  await new Promise((done) => setTimeout(done, settings.warmupMs));
  const session = new Session();
  if (settings.heap) {
    session.connect();
    await session.post('HeapProfiler.startSampling', SAMPLING);
    process.kill(server.pid, 'SIGUSR2');
  }
  const before = cpuSnapshot({ server: server.pid, backend: [] });
  counting = true;
  await new Promise((done) => setTimeout(done, settings.durationMs));
  counting = false;
  const after = cpuSnapshot({ server: server.pid, backend: [] });
  const counted = pairs;
  let allocation: { client: PerPair; server: PerPair } | undefined;
  if (settings.heap) {
    process.kill(server.pid, 'SIGUSR2');
    const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as {
      profile: { head: Parameters<typeof allocationSites>[0] };
    };
    session.disconnect();
    const client = bytesPerPair(allocationSites(profile.head), counted, settings.top);
    allocation = {
      client,
      server: bytesPerPair(await serverSites(serverHeapOut), counted, settings.top),
    };
  }
  stop = true;
  await Promise.allSettled(loops);
  await Promise.all(clients.map((client) => client.close()));
  await server.stop();
  const perPair = (key: 'client' | 'server') =>
    Math.round(((after[key] - before[key]) * 1_000) / counted);
  return {
    shape: settings.shape,
    client: settings.clientModule ?? '@dlm/client',
    server: settings.serverMain ?? 'apps/server/dist/main.js',
    pairsPerSecond: Math.round((counted * 1_000) / settings.durationMs),
    clientCpuUsPerPair: perPair('client'),
    serverCpuUsPerPair: perPair('server'),
    ...(allocation
      ? {
          clientBytesPerPair: allocation.client.bytes,
          serverBytesPerPair: allocation.server.bytes,
        }
      : {}),
    ...(settings.top && allocation
      ? { clientTop: allocation.client.top, serverTop: allocation.server.top }
      : {}),
  };
}

try {
  const result = await run(settingsOf(process.argv.slice(2)));
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  process.stderr.write(usageFailure('pair-cost', error));
  process.exit(2);
}
