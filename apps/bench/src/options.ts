import {
  type FlagOptions,
  flagsOf,
  HELP_FLAG,
  integerFlag,
  parseFlags,
  UsageError,
} from '@dlm/flags';
import type { ContentionOptions } from './workloads/contention.js';
import type { ScaleOptions } from './workloads/scale.js';
import type { SharedModesOptions } from './workloads/shared-modes.js';

export const WORKLOADS = [
  'uncontended',
  'throughput',
  'shared',
  'contention',
  'semaphore',
  'read-write',
  'floor',
  'scale',
] as const;
export type Workload = (typeof WORKLOADS)[number];

export interface BenchOptions {
  smoke: boolean;
  /** Each target's workloads 1–3 are run this many times; the table shows medians. */
  repeat: number;
  /** Target ids to run (all when empty). */
  only: string[];
  workloads: Workload[];
  uncontended: { count: number; warmup: number; maxMs: number };
  throughput: { clients: number; durationMs: number; warmupMs: number };
  /** The run's `ttlMs` completes them. */
  contention: Omit<ContentionOptions, 'ttlMs'>;
  /** Workloads 6 (semaphore) and 7 (read-write); the run's `ttlMs` completes them. */
  sharedModes: Omit<SharedModesOptions, 'ttlMs'>;
  ttlMs: number;
  /** The retry interval of every polling peer (raw Redis, redlock, redis-semaphore, etcd3). */
  pollMs: number;
  /** The run's `profileDir` completes them. */
  scale: Omit<ScaleOptions, 'profileDir'>;
  /** Where latest.json and RESULTS.md go. */
  outDir: string | undefined;
  /** Run every dlm server under `node --cpu-prof`, profiles written here. */
  profileDir: string | undefined;
}

export const USAGE = `Usage: pnpm bench [options]          (from the repo root: builds, then runs)
       node apps/bench/dist/main.js [options]

Starts redis-server (1 + 3 nodes, and a cluster of 3 masters + 3 replicas), etcd and ZooKeeper
on free loopback ports, then drives the same workloads through dlm (a server process per
adapter, over WebSocket with @dlm/client; and lib-*: @dlm/core + an adapter in this process)
and through the peer libraries directly. Prints one table; writes results/latest.json and
results/RESULTS.md (--smoke: results/smoke/).

  --smoke                 tiny counts, about a second per workload, every backend (CI)
  --repeat N              rounds of workloads 1-3, 5 and the floors, interleaved (every target
                          once per round); medians reported (default 3, smoke 1)
  --only ID,ID            targets to run (ids: see --list); default all
  --workloads W,W         uncontended,throughput,shared,contention,semaphore,read-write,floor,
                          scale (default all);
                          floor: the plain write of etcd, ZooKeeper and the disk that the
                          selected targets' acquire p99 is held to (issue 21)
  --count N               workload 1: timed pairs (default 1000; at most 10 s)
  --warmup N              workload 1: untimed pairs first (default 2000: a fresh server's JIT)
  --clients N             workloads 2 and 5: concurrent callers (default 32); in 2 each has
                          its own client, in 5 they share one
  --contenders N          workload 3: clients on the one lock (default 8)
  --shared-clients N      workloads 6 (semaphore of 4 permits) and 7 (read-write lock, 90%
                          reads): clients on the one name (default 16); measured for 2000 ms
                          (smoke 300 ms) on dlm targets whose backend has sharedModes
  --duration-ms MS        workloads 2, 3 and the floors: measured window (default 2000)
  --warmup-ms MS          workloads 2, 3 and the floors: untimed run-in (default 500)
  --hold-ms MS            workload 3: hold time; 0 = one event-loop turn (default 0)
  --wait-ms MS            workload 3: wait per acquire (default 5000)
  --ttl-ms MS             lease length everywhere (default 10000)
  --poll-ms MS            retry interval of the polling peers (default 10)
  --scale-sessions N      workload 4: sessions (default 50000; fewer if the open-file hard
                          limit is lower, said in the results)
  --scale-locks N         workload 4: held locks (default 500000)
  --scale-probe-at N      workload 4: held locks at the first latency probe (default 1000)
  --scale-recovery-locks N  workload 4: locks held on a data-dir server before its kill -9 and
                          restart (default --scale-locks; 0 skips the recovery step)
  --probe-count N         workload 4: acquires per probe (default 1000)
  --out DIR               where to write the results
  --profile-dir DIR       run each dlm server under node --cpu-prof, profiles written to DIR
  --list                  print the target ids and exit
  -h, --help
`;

export { UsageError };

const OPTIONS = {
  ...flagsOf(
    'string',
    'repeat',
    'only',
    'workloads',
    'count',
    'warmup',
    'clients',
    'contenders',
    'shared-clients',
    'duration-ms',
    'warmup-ms',
    'hold-ms',
    'wait-ms',
    'ttl-ms',
    'poll-ms',
    'scale-sessions',
    'scale-locks',
    'scale-probe-at',
    'scale-recovery-locks',
    'probe-count',
    'out',
    'profile-dir',
  ),
  ...flagsOf('boolean', 'smoke', 'list'),
  ...HELP_FLAG,
} as const satisfies FlagOptions;

function positive(value: string | undefined, fallback: number, flag: string, min = 1): number {
  return integerFlag(value, fallback, `--${flag}`, { min });
}

/** The options, or which of --help / --list was asked for. */
export function parseOptions(argv: string[]): BenchOptions | { help: true } | { list: true } {
  // `pnpm bench -- --smoke` hands on its `--`: parseFlags drops a leading one.
  const { values } = parseFlags(argv, OPTIONS);
  if (values.help) return { help: true };
  if (values.list) return { list: true };
  const flag = (name: keyof typeof OPTIONS) => values[name] as string | undefined;
  const smoke = values.smoke === true;
  const workloads = (flag('workloads') ?? WORKLOADS.join(','))
    .split(',')
    .map((w) => w.trim())
    .filter(Boolean);
  for (const workload of workloads) {
    if (!(WORKLOADS as readonly string[]).includes(workload)) {
      throw new UsageError(`--workloads: unknown ${workload} (${WORKLOADS.join(', ')})`);
    }
  }
  const durationMs = positive(flag('duration-ms'), smoke ? 1_000 : 2_000, 'duration-ms');
  const warmupMs = positive(flag('warmup-ms'), smoke ? 200 : 500, 'warmup-ms', 0);
  const sessions = positive(flag('scale-sessions'), smoke ? 200 : 50_000, 'scale-sessions');
  const locks = positive(flag('scale-locks'), smoke ? 2_000 : 500_000, 'scale-locks');
  return {
    smoke,
    repeat: positive(flag('repeat'), smoke ? 1 : 3, 'repeat'),
    only: (flag('only') ?? '')
      .split(',')
      .map((id) => id.trim())
      .filter(Boolean),
    workloads: workloads as Workload[],
    uncontended: {
      count: positive(flag('count'), smoke ? 50 : 1_000, 'count'),
      warmup: positive(flag('warmup'), smoke ? 10 : 2_000, 'warmup', 0),
      maxMs: smoke ? 5_000 : 10_000,
    },
    throughput: {
      clients: positive(flag('clients'), 32, 'clients'),
      durationMs,
      warmupMs,
    },
    contention: {
      clients: positive(flag('contenders'), 8, 'contenders', 2),
      durationMs,
      warmupMs,
      holdMs: positive(flag('hold-ms'), 0, 'hold-ms', 0),
      waitMs: positive(flag('wait-ms'), 5_000, 'wait-ms'),
    },
    // Smoke: shorter than the others' second, to keep CI's smoke near its time.
    sharedModes: {
      clients: positive(flag('shared-clients'), 16, 'shared-clients', 2),
      durationMs: flag('duration-ms') === undefined && smoke ? 300 : durationMs,
      warmupMs: flag('warmup-ms') === undefined && smoke ? 50 : warmupMs,
      holdMs: positive(flag('hold-ms'), 0, 'hold-ms', 0),
      waitMs: positive(flag('wait-ms'), 5_000, 'wait-ms'),
    },
    ttlMs: positive(flag('ttl-ms'), 10_000, 'ttl-ms'),
    pollMs: positive(flag('poll-ms'), 10, 'poll-ms'),
    scale: {
      sessions,
      locks,
      probeAtLocks: positive(flag('scale-probe-at'), smoke ? 200 : 1_000, 'scale-probe-at'),
      probeCount: positive(flag('probe-count'), smoke ? 100 : 1_000, 'probe-count'),
      sessionsPerWorker: 2_500,
      settleMs: smoke ? 1_000 : 10_000,
      phaseTimeoutMs: smoke ? 60_000 : 600_000,
      recoveryLocks: positive(flag('scale-recovery-locks'), locks, 'scale-recovery-locks', 0),
    },
    outDir: flag('out'),
    profileDir: flag('profile-dir'),
  };
}
