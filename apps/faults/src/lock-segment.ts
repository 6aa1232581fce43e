import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ManagedProcess, startProcess } from '@dlm/test-services';
import { type DlmServer, healAll } from './dlm-server.js';
import { createHistoryWriter, parseHistory } from './history.js';
import {
  checkLinearizability,
  type LinearizabilityResult,
  type LockOpEvent,
} from './linearizability.js';
import type { LockWorkerConfig } from './lock-worker-entry.js';
import type { Nemesis, NemesisContext } from './nemeses.js';
import { entryPoint } from './paths.js';
import { monoNow, sleep } from './time.js';
import type { Topology } from './topology.js';

/**
 * Nemeses a lock segment can run: those that act on the server, the backend or the clock. The
 * workload's processes have no proxies of their own here, so client faults do not apply.
 */
export const LOCK_SEGMENT_NEMESES = new Set([
  'none',
  'server-kill',
  'server-pause',
  'backend-kill',
  'backend-pause',
  'backend-clock-back',
  'majority-kill',
  'master-kill',
  'leader-kill',
  'follower-kill',
  'leader-pause',
  'follower-pause',
  'clock-jump',
  'clock-skew',
]);

export interface LockSegmentOptions {
  ttlMs: number;
  nemesis: Nemesis;
  durationMs: number;
  /** Connections in all, spread over the servers in turn. Default 8. */
  connections?: number;
  /** Lock names they share. Default 3. */
  names?: number;
  /** A client's pause between operations: random up to this, ms. Default 10. */
  thinkMs?: number;
  dir: string;
  log: (line: string) => void;
}

export interface LockSegmentResult {
  backend: string;
  nemesis: string;
  /** dlm servers the connections were spread over (two where the backend is shared). */
  servers: number;
  connections: number;
  durationMs: number;
  check: LinearizabilityResult;
  errors: string[];
}

const PROCESSES = 2;
const REQUEST_TIMEOUT_MS = 3_000;

/**
 * A linearizability segment: `connections` clients in two processes, spread over `servers`
 * (the nemesis acts on the first), doing try-acquire / release / get on a few fresh names for
 * `durationMs` while the nemesis injects faults; then everything is healed, the workload
 * stopped, and each name's history checked against the sequential specification.
 */
export async function runLockSegment(
  topology: Topology,
  servers: DlmServer[],
  options: LockSegmentOptions,
): Promise<LockSegmentResult> {
  const { dir, ttlMs, nemesis } = options;
  if (!LOCK_SEGMENT_NEMESES.has(nemesis.name)) {
    throw new Error(`nemesis ${nemesis.name} does not apply to a lock segment`);
  }
  mkdirSync(dir, { recursive: true });
  const connections = options.connections ?? 8;
  const tag = `lin-${nemesis.name}-${Math.random().toString(36).slice(2, 7)}`;
  const names = Array.from({ length: options.names ?? 3 }, (_, i) => `${tag}/n${i + 1}`);
  const errors: string[] = [];
  const nemesisLog = createHistoryWriter(join(dir, 'nemesis.jsonl'), 'nemesis');
  const target = servers[0]!;

  const workers: ManagedProcess[] = [];
  for (let p = 0; p < PROCESSES; p++) {
    const urls: string[] = [];
    for (let c = p; c < connections; c += PROCESSES) urls.push(servers[c % servers.length]!.url);
    const config: LockWorkerConfig = {
      proc: `l${p + 1}`,
      urls,
      names,
      ttlMs,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      historyDir: dir,
      thinkMs: [0, options.thinkMs ?? 10],
      releaseAtOnce: 0.5,
    };
    workers.push(
      await startProcess({
        name: `lock worker l${p + 1}`,
        command: process.execPath,
        args: [entryPoint('lock-worker-entry.js')],
        env: { DLM_FAULTS_LOCK_WORKER: JSON.stringify(config) },
        ready: async () => true,
      }),
    );
  }

  let faultSeq = 0;
  const context: NemesisContext = {
    ttlMs,
    topology,
    server: target.process,
    clock: (command) => target.clock(command),
    workers: () => [],
    async replaceWorker() {
      throw new Error('a lock segment has no worker to replace');
    },
    fault(start) {
      const id = ++faultSeq;
      nemesisLog.record({ kind: 'fault', id, phase: 'start', ...start });
      return () => nemesisLog.record({ kind: 'fault', id, phase: 'end', nemesis: start.nemesis });
    },
    processEvent(targetName, what) {
      nemesisLog.record({ kind: 'process', target: targetName, what });
    },
  };

  const startedAt = monoNow();
  await sleep(1_000);
  for (let n = 0; nemesis.name !== 'none'; n++) {
    if (monoNow() - startedAt >= options.durationMs) break;
    try {
      await nemesis.inject(context, n);
    } catch (error) {
      errors.push(`${nemesis.name} #${n}: ${(error as Error).message}`);
      options.log(`  ! ${errors.at(-1)}`);
    }
    await sleep(Math.max(1_500, ttlMs));
  }
  const left = options.durationMs - (monoNow() - startedAt);
  if (left > 0) await sleep(left);

  const healError = await healAll(topology, servers);
  if (healError) errors.push(healError);
  // A little quiet after healing, so that the histories end with the system working again.
  await sleep(1_000);
  await Promise.all(workers.map((worker) => worker.stop(5_000)));
  nemesisLog.close();

  const events = readdirSync(dir)
    .filter((file) => file.endsWith('.jsonl'))
    .flatMap((file) => parseHistory(readFileSync(join(dir, file), 'utf8')))
    .filter((event): event is LockOpEvent => event.kind === 'lock');
  const check = checkLinearizability(events, {
    // A lease lasts at least the TTL from when its acquire was sent; 5 % for the skew between
    // the harness's clock and the backend's.
    expiryAfterMs: ttlMs * 0.95,
    // A request whose reply was lost is bounded by the request time-out on the client and by
    // the adapters' own command deadlines; a release the client re-sends in the background
    // after a lost reply runs for at most the lease.
    unknownHorizonMs: REQUEST_TIMEOUT_MS + ttlMs,
  });
  return {
    backend: topology.variant,
    nemesis: nemesis.name,
    servers: servers.length,
    connections,
    durationMs: options.durationMs,
    check,
    errors,
  };
}
