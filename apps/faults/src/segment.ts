import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, type ManagedProcess, startProcess } from '@dlm/test-services';
import { type CheckResult, checkHistory } from './checker.js';
import { type DlmServer, healAll } from './dlm-server.js';
import { createHistoryWriter, type HistoryEvent, readHistoryDir } from './history.js';
import type { Nemesis, NemesisContext, WorkerHandle } from './nemeses.js';
import { entryPoint } from './paths.js';
import { createTcpProxy } from './tcp-proxy.js';
import { monoNow, sleep } from './time.js';
import type { Topology } from './topology.js';
import type { WorkerConfig, WorkerStatus } from './worker-config.js';

export interface WorkloadOptions {
  ttlMs: number;
  /** Workload processes. */
  workers: number;
  /** Meddling processes (meddler.ts): non-holders that know every token. Default 0. */
  meddlers?: number;
  /** Lock names (= resource keys) they share. */
  keys: number;
  l1BoundMs: number;
  l4BoundMs: number;
  /** Every exclusive acquire asks for this lock-delay (ms); absent: none. */
  lockDelayMs?: number;
  /** Every exclusive acquire asks for this cap on holding (ms); absent: none. */
  maxHoldMs?: number;
}

export interface SegmentOptions extends WorkloadOptions {
  nemesis: Nemesis;
  durationMs: number;
  /** The resource's fencing check; off is the negative control. */
  fencing: boolean;
  /** Where this segment's histories go. */
  dir: string;
  log: (line: string) => void;
}

export interface SegmentResult {
  backend: string;
  nemesis: string;
  /**
   * Absent: the fenced read-modify-write on exclusive locks. `semaphore` / `read-write`: a
   * shared-mode workload (see `runSharedSegment`), checked for S7 above all.
   */
  workload?: 'semaphore' | 'read-write';
  /** What the workload was, for the report (`limit 3`, `20% writes`). */
  workloadDetail?: string;
  fencing: boolean;
  durationMs: number;
  check: CheckResult;
  finalValues: Record<string, number>;
  /** Faults whose injection failed (a member that would not restart…). */
  errors: string[];
}

async function resourceState(port: number): Promise<Record<string, number>> {
  const response = await fetch(`http://127.0.0.1:${port}/state`, {
    signal: AbortSignal.timeout(5_000),
  });
  const state = (await response.json()) as { keys: Record<string, { value: number }> };
  return Object.fromEntries(Object.entries(state.keys).map(([key, { value }]) => [key, value]));
}

/** The fenced resource as a process of its own, on a free port (`resource-entry.ts`). */
async function startResource(dir: string, fencing: boolean) {
  const port = await freePort();
  const managed = await startProcess({
    name: 'fenced resource',
    command: process.execPath,
    args: [
      entryPoint('resource-entry.js'),
      '--port',
      String(port),
      ...(fencing ? [] : ['--no-fencing']),
    ],
    env: { DLM_FAULTS_HISTORY: join(dir, 'resource.jsonl') },
    ready: async () => {
      try {
        return (await fetch(`http://127.0.0.1:${port}/state`)).ok;
      } catch {
        return false;
      }
    },
  });
  return { port, process: managed };
}

type HistoryWriter = ReturnType<typeof createHistoryWriter>;

/** What every worker of a segment shares. */
interface WorkerSetup {
  dir: string;
  names: string[];
  ttlMs: number;
  resourcePort: number;
  nemesisLog: HistoryWriter;
  /** Per worker (by its first proc id): what its config differs in; a replacement keeps it. */
  variants: Map<string, WorkerVariant>;
  /** Every exclusive acquire's lock-delay (ms); absent: none. */
  lockDelayMs?: number | undefined;
  /** Every exclusive acquire's cap on holding (ms); absent: none. */
  maxHoldMs?: number | undefined;
}

/** A worker's own names and shared-mode workload, where they are not the segment's. */
type WorkerVariant = Partial<Pick<WorkerConfig, 'names' | 'shared' | 'clients'>>;

/** Starts one workload process (`worker-entry.ts`) behind `proxy`, and logs its start. */
async function startWorker(
  setup: WorkerSetup,
  proc: string,
  proxy: WorkerHandle['proxy'],
  role: WorkerConfig['role'] = 'holder',
): Promise<WorkerHandle> {
  const { dir, ttlMs } = setup;
  const variant = setup.variants.get(proc.split('.')[0]!) ?? {};
  const statusPath = join(dir, `${proc}.status.json`);
  const config: WorkerConfig = {
    proc,
    url: `ws://127.0.0.1:${proxy.port}/v1/ws`,
    resourceUrl: `http://127.0.0.1:${setup.resourcePort}`,
    names: setup.names,
    ttlMs,
    waitMs: 3 * ttlMs,
    historyPath: join(dir, `${proc}.jsonl`),
    statusPath,
    holdMs: [10, 100],
    thinkMs: [0, 50],
    extendProbability: 0.25,
    requestTimeoutMs: 5_000,
    role,
    ...(setup.lockDelayMs ? { lockDelayMs: setup.lockDelayMs } : {}),
    ...(setup.maxHoldMs ? { maxHoldMs: setup.maxHoldMs } : {}),
    ...variant,
  };
  const managed: ManagedProcess = await startProcess({
    name: `worker ${proc}`,
    command: process.execPath,
    args: [entryPoint('worker-entry.js')],
    env: { DLM_FAULTS_WORKER: JSON.stringify(config) },
    ready: async () => true,
  });
  setup.nemesisLog.record({ kind: 'process', target: proc, what: 'start' });
  return {
    proc,
    process: managed,
    proxy,
    status() {
      try {
        return JSON.parse(readFileSync(statusPath, 'utf8')) as WorkerStatus;
      } catch {
        return undefined;
      }
    },
  };
}

/** `count` processes named `prefix1…`, each behind a TCP proxy of its own to the server. */
async function startWorkers(
  setup: WorkerSetup,
  server: DlmServer,
  count: number,
  prefix: string,
  role: WorkerConfig['role'],
  variant?: WorkerVariant,
): Promise<WorkerHandle[]> {
  const started: WorkerHandle[] = [];
  for (let i = 1; i <= count; i++) {
    const proxy = await createTcpProxy({ targetPort: server.port });
    if (variant) setup.variants.set(`${prefix}${i}`, variant);
    started.push(await startWorker(setup, `${prefix}${i}`, proxy, role));
  }
  return started;
}

/** What a nemesis may do to this segment; faults and process events go to the nemesis log. */
function nemesisContext(
  topology: Topology,
  server: DlmServer,
  setup: WorkerSetup,
  workers: WorkerHandle[],
): NemesisContext {
  const { nemesisLog } = setup;
  const replacements = new Map<string, number>();
  let faultSeq = 0;
  return {
    ttlMs: setup.ttlMs,
    topology,
    server: server.process,
    clock: (command) => server.clock(command),
    workers: () => workers,
    async replaceWorker(dead) {
      const base = dead.proc.split('.')[0]!;
      const n = (replacements.get(base) ?? 0) + 1;
      replacements.set(base, n);
      const fresh = await startWorker(setup, `${base}.${n}`, dead.proxy);
      workers[workers.indexOf(dead)] = fresh;
    },
    fault(start) {
      const id = ++faultSeq;
      nemesisLog.record({ kind: 'fault', id, phase: 'start', ...start });
      return () => {
        nemesisLog.record({
          kind: 'fault',
          id,
          phase: 'end',
          nemesis: start.nemesis,
          ...(start.target === undefined ? {} : { target: start.target }),
        });
      };
    },
    processEvent(target, what) {
      nemesisLog.record({ kind: 'process', target, what });
    },
  };
}

/** One bounded fault after another for `durationMs`; a failed injection is noted, not fatal. */
async function injectFaults(
  options: SegmentOptions,
  context: NemesisContext,
  errors: string[],
): Promise<void> {
  const startedAt = monoNow();
  await sleep(1_500);
  for (let n = 0; options.nemesis.name !== 'none'; n++) {
    if (monoNow() - startedAt >= options.durationMs) break;
    try {
      await options.nemesis.inject(context, n);
    } catch (error) {
      errors.push(`${options.nemesis.name} #${n}: ${(error as Error).message}`);
      options.log(`  ! ${errors.at(-1)}`);
    }
    await sleep(Math.max(2_000, options.ttlMs) + Math.random() * 1_000);
  }
  if (options.nemesis.name === 'none') await sleep(options.durationMs);
}

/** What a segment's workload run leaves to check: the merged history and the counters. */
interface WorkloadRun {
  events: HistoryEvent[];
  finalValues: Record<string, number>;
  errors: string[];
}

/**
 * A fresh resource and the workers `startAll` starts (on fresh lock names), the nemesis
 * injecting one bounded fault after another for `durationMs`, then everything healed, a
 * settling period (TTL + 3 s) in which the system must recover, the workers stopped, and the
 * histories merged.
 */
async function runWorkload(
  topology: Topology,
  server: DlmServer,
  options: SegmentOptions,
  startAll: (setup: WorkerSetup) => Promise<{ workers: WorkerHandle[]; others: WorkerHandle[] }>,
): Promise<WorkloadRun> {
  const { dir, ttlMs } = options;
  mkdirSync(dir, { recursive: true });
  const errors: string[] = [];

  const resource = await startResource(dir, options.fencing);
  const nemesisLog = createHistoryWriter(join(dir, 'nemesis.jsonl'), 'nemesis');
  const setup: WorkerSetup = {
    dir,
    names: [],
    ttlMs,
    resourcePort: resource.port,
    nemesisLog,
    variants: new Map(),
  };
  const { workers, others } = await startAll(setup);

  await injectFaults(options, nemesisContext(topology, server, setup, workers), errors);

  // Heal whatever a failed injection may have left broken.
  for (const worker of workers) worker.proxy.heal();
  const healError = await healAll(topology, [server]);
  if (healError) errors.push(healError);
  await sleep(ttlMs + 3_000);

  const all = [...workers, ...others];
  for (const worker of all)
    nemesisLog.record({ kind: 'process', target: worker.proc, what: 'stop' });
  await Promise.all(all.map((worker) => worker.process.stop(8_000)));
  let finalValues: Record<string, number> = {};
  try {
    finalValues = await resourceState(resource.port);
  } catch (error) {
    errors.push(`resource state: ${(error as Error).message}`);
  }
  await resource.process.stop();
  nemesisLog.close();
  await Promise.all(all.map((worker) => worker.proxy.close()));
  return { events: readHistoryDir(dir), finalValues, errors };
}

const segmentTag = (options: SegmentOptions) =>
  `${options.nemesis.name}-${Math.random().toString(36).slice(2, 7)}`;

/**
 * One row of the report: the fenced read-modify-write on `keys` exclusive locks by `workers`
 * processes (and `meddlers`), under the nemesis, checked against S1–S6, L1 and L4.
 */
export async function runSegment(
  topology: Topology,
  server: DlmServer,
  options: SegmentOptions,
): Promise<SegmentResult> {
  const tag = segmentTag(options);
  const names = Array.from({ length: options.keys }, (_, i) => `${tag}/k${i + 1}`);
  const run = await runWorkload(topology, server, options, async (setup) => {
    setup.names = names;
    setup.lockDelayMs = options.lockDelayMs;
    setup.maxHoldMs = options.maxHoldMs;
    const workers = await startWorkers(setup, server, options.workers, 'w', 'holder');
    // Meddlers hold nothing, so the nemeses (which pick holders) leave them alone; server and
    // backend faults reach them all the same.
    const others = await startWorkers(setup, server, options.meddlers ?? 0, 'm', 'meddler');
    return { workers, others };
  });
  const check = checkHistory(run.events, {
    l1BoundMs: options.l1BoundMs,
    l4BoundMs: options.l4BoundMs,
    finalValues: run.finalValues,
  });
  return {
    backend: topology.variant,
    nemesis: options.nemesis.name,
    fencing: options.fencing,
    durationMs: options.durationMs,
    check,
    finalValues: run.finalValues,
    errors: run.errors,
  };
}

/** The shared-mode workloads of `runSharedSegment`: processes × clients per name. */
export const SHARED_WORKLOADS = {
  /** 6 clients after 3 permits. */
  semaphore: { processes: 2, clients: 3, limit: 3 },
  /** 6 clients, a fifth of the acquires writes (exclusive), the rest reads (shared). */
  readWrite: { processes: 2, clients: 3, writeProbability: 0.2 },
} as const;

/**
 * Two rows of the report from one run: a semaphore (limit 3) and a read-write lock, each on a
 * name of its own, side by side under the nemesis (one run for both keeps the CI campaign
 * short). Each name's history is checked on its own, S7 above all; the writers' fenced
 * read-modify-write is checked for S1 and S3 as in `runSegment`.
 */
export async function runSharedSegment(
  topology: Topology,
  server: DlmServer,
  options: SegmentOptions,
): Promise<SegmentResult[]> {
  const tag = segmentTag(options);
  const semaphore = `${tag}/semaphore`;
  const readWrite = `${tag}/read-write`;
  const { semaphore: sem, readWrite: rw } = SHARED_WORKLOADS;
  const run = await runWorkload(topology, server, options, async (setup) => {
    const permits = await startWorkers(setup, server, sem.processes, 's', 'holder', {
      names: [semaphore],
      shared: { kind: 'semaphore', limit: sem.limit },
      clients: sem.clients,
    });
    const readers = await startWorkers(setup, server, rw.processes, 'r', 'holder', {
      names: [readWrite],
      shared: { kind: 'read-write', writeProbability: rw.writeProbability },
      clients: rw.clients,
    });
    return { workers: [...permits, ...readers], others: [] };
  });
  const rows: [SegmentResult['workload'] & string, string, string][] = [
    ['semaphore', semaphore, `limit ${sem.limit}, ${sem.processes * sem.clients} clients`],
    [
      'read-write',
      readWrite,
      `${Math.round(rw.writeProbability * 100)}% writes, ${rw.processes * rw.clients} clients`,
    ],
  ];
  const sharedGrants = run.events.filter(
    (event) =>
      event.kind === 'op' &&
      event.f === 'acquire' &&
      event.type === 'ok' &&
      event.mode === 'shared',
  ).length;
  if (!sharedGrants) {
    // A server that declares sharedModes and a client that drops `mode` would make every
    // grant exclusive: S7 would hold vacuously.
    throw new Error(
      `${topology.variant} × ${options.nemesis.name}: no shared grant in the semaphore and read-write workloads (does the client pass mode?)`,
    );
  }
  return rows.map(([workload, name, detail]) => {
    const finalValues = name in run.finalValues ? { [name]: run.finalValues[name]! } : {};
    const check = checkHistory(onlyName(run.events, name), {
      l1BoundMs: options.l1BoundMs,
      l4BoundMs: options.l4BoundMs,
      finalValues,
    });
    return {
      backend: topology.variant,
      nemesis: options.nemesis.name,
      workload,
      workloadDetail: detail,
      fencing: options.fencing,
      durationMs: options.durationMs,
      check,
      finalValues,
      errors: run.errors,
    };
  });
}

/** The events about lock `name`, and those about no lock (faults, processes). */
function onlyName(events: HistoryEvent[], name: string): HistoryEvent[] {
  return events.filter((event) => !('name' in event) || event.name === name);
}
