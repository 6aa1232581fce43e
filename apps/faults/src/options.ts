import {
  type FlagOptions,
  flagsOf,
  HELP_FLAG,
  integerFlag,
  parseDuration,
  parseFlags,
  UsageError,
} from '@dlm/flags';
import type { CampaignOptions } from './campaign.js';
import { LOCK_SEGMENT_NEMESES } from './lock-segment.js';
import { NEMESES } from './nemeses.js';
import { BACKENDS, type BackendVariant, isBackendVariant } from './topology.js';

export const USAGE = `Usage: dlm-faults [options]   (from the repo: pnpm --filter @dlm/faults faults -- [options])

Runs a fenced read-modify-write workload in separate processes against a dlm server, injects
faults, checks the history (S1-S7, S9, S10, L1, L4) and writes a report (Markdown + JSON).

  --backend LIST        ${BACKENDS.join(', ')} or all (default all)
  --nemesis LIST        nemeses to run, one segment each, or all (default: all that apply):
                        ${NEMESES.map((n) => n.name).join(', ')}
  --duration D          faults per segment, e.g. 30s, 2m (default 30s; 15s with --short); per
                        backend with BACKEND=D items: --duration 30s,embedded=60s
  --ttl-ms N            lease TTL asked for (default 2000; etcd's minimum)
  --workers N           workload processes (default 3)
  --meddlers N          meddling processes: they release, extend and re-acquire others' leases
                        with the public token and owner, never the key (default 1; 0 for none)
  --keys N              lock names they share (default 2)
  --l1-bound-ms N       L1 bound past the lease's end (default 2000)
  --l4-bound-ms N       L4 bound past the local deadline (default 1000)
  --negative-control    add a segment with the resource's fencing off (must show lost updates)
  --no-fencing          run every segment with the resource's fencing off
  --lin LIST            nemeses for linearizability segments (try-acquire/release/get, two
                        servers per shared backend), one segment each (default: none;
                        with --short: server-kill); without --nemesis, only these run
  --lin-duration D      faults per linearizability segment (default 6s; with --short,
                        postgres=15s); per backend with BACKEND=D items: 6s,postgres=20s
  --lin-connections N   connections in a linearizability segment (default 8)
  --lin-names N         lock names they share (default 3)
  --lin-think-ms N      a client's pause between operations, random up to N ms (default 10;
                        half the grants are released at once, without a pause)
  --lin-negative-control  on a postgres backend, add a linearizability segment on a planted
                        backend whose try-lock takes its token before the row lock (must be
                        flagged; on with --short)
  --lock-delay-control  on the first backend that keeps lock-delays, add client-pause segments
                        where every exclusive acquire asks for a lock-delay of 3 × TTL: on the
                        real server (S9 must not show) and on a planted backend that ignores
                        the delay (S9 must show; on with --short)
  --hold-cap-control    on the first backend that keeps caps on holding, add client-pause
                        segments where every exclusive acquire asks for a cap of one TTL (every
                        extend asks past it): on the real server (S10 must not show) and on a
                        planted backend that ignores the cap (S10 must show; on with --short)
  --shared LIST         nemeses for shared-mode segments (a semaphore of limit 3 and a
                        read-write lock side by side, checked for S7), one segment each, on
                        backends that declare sharedModes and strict fencing (default: none;
                        with --short: the backend's first short nemesis); without --nemesis,
                        only these run
  --shared-duration D   faults per shared-mode segment (default 6s)
  --short               the CI campaign: one or two nemeses per backend, 15 s each, negative
                        control, a linearizability segment per backend, and a shared-mode
                        segment per strict backend
  --lanes N             backends run side by side, each on its own services (default 1;
                        3 with --short)
  --out DIR             where the report goes (default apps/faults/results)
  --label NAME          report file name (default campaign-<time>)
  --history-dir DIR     keep the histories there (default: a temp dir, removed at exit)
  --merge A.json,B.json no campaign: merge the JSON reports of earlier runs (--out, --label)
  -h, --help

Durations: 500ms, 30s, 5m, 1h, 1m30s; a number needs its unit (flags named -ms take a plain
number of milliseconds).

Exit status: 0 when no unexpected violation was found (and the negative control, if run, was
detected), 1 otherwise, 2 on bad flags.`;

/**
 * The short campaign's linearizability segments: a dlm server killed while a second one on
 * the same backend serves on (embedded: one server, restarted on its data dir).
 */
const SHORT_LOCK_PLAN = ['server-kill'];

/**
 * Backends side by side with --short: each mostly waits on its faults, so three lanes on two
 * cores end the campaign in about half the time of one, with the same segments and checks.
 */
const SHORT_LANES = 3;

/** Per-backend linearizability durations with --short, beside the default 6 s. */
const SHORT_LOCK_DURATIONS = 'postgres=15s';

/**
 * The short campaign CI runs: at least one nemesis per backend; a backend with none is left
 * out of `--short` (Sentinel without minReplicas: both Sentinel variants took 80 s, over the
 * 60 s it may add; the one that declares strict fencing runs).
 */
const SHORT_PLAN: Record<BackendVariant, string[]> = {
  embedded: ['client-pause', 'server-kill'],
  redis: ['backend-kill', 'backend-clock-back'],
  'redis-noaof': ['backend-kill'],
  redlock: ['backend-kill', 'majority-kill'],
  'redis-cluster': ['master-kill'],
  'redis-cluster-wait': [],
  etcd: ['leader-kill'],
  zookeeper: ['leader-kill'],
  postgres: ['backend-kill'],
  'redis-sentinel': [],
  'redis-sentinel-wait': ['master-kill'],
};

/**
 * The short campaign's shared-mode segments: the first nemesis of the backend's short plan,
 * 6 s, on the backends with strict fencing (Redlock's would be skipped by the capability gate
 * anyway). Redis without AOF is left out: its restart forgets holders (violations expected by
 * its declaration), and the ~15 s it would add are better spent elsewhere in the CI budget.
 */
const SHORT_SHARED_PLAN: Record<BackendVariant, string[]> = {
  ...(Object.fromEntries(
    Object.entries(SHORT_PLAN).map(([backend, plan]) => [backend, plan.slice(0, 1)]),
  ) as Record<BackendVariant, string[]>),
  'redis-noaof': [],
  redlock: [],
};

const OPTIONS = {
  ...flagsOf(
    'string',
    'backend',
    'nemesis',
    'duration',
    'ttl-ms',
    'workers',
    'meddlers',
    'keys',
    'l1-bound-ms',
    'l4-bound-ms',
    'lin',
    'lin-duration',
    'lin-connections',
    'lin-names',
    'lin-think-ms',
    'shared',
    'shared-duration',
    'out',
    'label',
    'history-dir',
    'merge',
    'lanes',
  ),
  ...flagsOf(
    'boolean',
    'negative-control',
    'no-fencing',
    'short',
    'lin-negative-control',
    'lock-delay-control',
    'hold-cap-control',
  ),
  ...HELP_FLAG,
} as const satisfies FlagOptions;

type Values = ReturnType<typeof parseFlags<typeof OPTIONS>>['values'];

/** What `dlm-faults` was asked to do. `out` and `label` are unset when not given. */
export type FaultsCommand =
  | { kind: 'help' }
  | {
      kind: 'merge';
      short: boolean;
      files: string[];
      out: string | undefined;
      label: string | undefined;
    }
  | {
      kind: 'campaign';
      short: boolean;
      campaign: Omit<CampaignOptions, 'log'>;
      out: string | undefined;
      label: string | undefined;
    };

/**
 * Reads `dlm-faults`'s flags (a leading `--` from `pnpm faults --` dropped).
 * @throws UsageError on a bad flag: main prints it with USAGE and exits 2.
 */
export function parseFaultsArgs(argv: readonly string[]): FaultsCommand {
  const { values } = parseFlags(argv, OPTIONS);
  if (values.help) return { kind: 'help' };
  const { out, label } = values;
  const short = values.short === true;
  if (values.merge) return { kind: 'merge', short, files: values.merge.split(','), out, label };
  return { kind: 'campaign', short, campaign: campaignOptions(values, short), out, label };
}

function campaignOptions(values: Values, short: boolean): Omit<CampaignOptions, 'log'> {
  const backends = backendList(values.backend).filter(
    (backend) => !short || values.backend !== undefined || SHORT_PLAN[backend].length > 0,
  );
  const nemeses = nemesisList(values.nemesis);
  const lockList = linList(values.lin, short);
  const sharedList = values.shared === undefined ? undefined : nemesisNames(values.shared);
  // `--lin` or `--shared` alone runs only those segments.
  const only = (values.lin !== undefined || values.shared !== undefined) && !values.nemesis;
  const durations = durationList(values.duration, short ? '15s' : '30s', '--duration');
  // PostgreSQL's segment runs longer with --short: long enough to catch, at least once in three
  // runs, the lower token that a grant taking its token before the row lock gave (issue 28).
  const lockDurations = durationList(
    values['lin-duration'] ?? (short ? SHORT_LOCK_DURATIONS : undefined),
    '6s',
    '--lin-duration',
  );
  return {
    backends,
    nemeses: (backend) => (short && !values.nemesis ? SHORT_PLAN[backend] : only ? [] : nemeses),
    durationMs: durations.durationMs,
    durationsMs: durations.durationsMs,
    lockNemeses: () => lockList,
    lockDurationMs: lockDurations.durationMs,
    lockDurationsMs: lockDurations.durationsMs,
    lockConnections: integerFlag(values['lin-connections'], 8, '--lin-connections'),
    lockNames: integerFlag(values['lin-names'], 3, '--lin-names'),
    lockThinkMs: integerFlag(values['lin-think-ms'], 10, '--lin-think-ms', { min: 0 }),
    linNegativeControl: short || values['lin-negative-control'] === true,
    lockDelayControl: short || values['lock-delay-control'] === true,
    holdCapControl: short || values['hold-cap-control'] === true,
    sharedNemeses: (backend) => sharedList ?? (short ? SHORT_SHARED_PLAN[backend] : []),
    sharedDurationMs: parseDuration(values['shared-duration'] ?? '6s', '--shared-duration'),
    ttlMs: integerFlag(values['ttl-ms'], 2_000, '--ttl-ms'),
    workers: integerFlag(values.workers, 3, '--workers'),
    meddlers: integerFlag(values.meddlers, 1, '--meddlers', { min: 0 }),
    keys: integerFlag(values.keys, 2, '--keys'),
    l1BoundMs: integerFlag(values['l1-bound-ms'], 2_000, '--l1-bound-ms'),
    l4BoundMs: integerFlag(values['l4-bound-ms'], 1_000, '--l4-bound-ms'),
    fencing: values['no-fencing'] !== true,
    negativeControl: short || values['negative-control'] === true,
    lanes: integerFlag(values.lanes, short ? SHORT_LANES : 1, '--lanes'),
    ...(values['history-dir'] ? { historyDir: values['history-dir'] } : {}),
  };
}

function backendList(text: string | undefined): BackendVariant[] {
  const list = !text || text === 'all' ? [...BACKENDS] : text.split(',');
  for (const backend of list) {
    if (!isBackendVariant(backend))
      throw new UsageError(`unknown backend ${JSON.stringify(backend)}`);
  }
  return list as BackendVariant[];
}

function nemesisList(text: string | undefined): string[] | 'all' {
  if (!text || text === 'all') return 'all';
  return nemesisNames(text);
}

function nemesisNames(text: string): string[] {
  const list = text.split(',').filter(Boolean);
  for (const name of list) {
    if (!NEMESES.some((n) => n.name === name))
      throw new UsageError(`unknown nemesis ${JSON.stringify(name)}`);
  }
  return list;
}

function linList(text: string | undefined, short: boolean): string[] {
  const list = text ? text.split(',') : short ? SHORT_LOCK_PLAN : [];
  for (const name of list) {
    if (!LOCK_SEGMENT_NEMESES.has(name)) {
      throw new UsageError(
        `nemesis ${JSON.stringify(name)} does not apply to a linearizability segment`,
      );
    }
  }
  return list;
}

/** `--duration 30s,embedded=60s` (and `--lin-duration`): a default and per-backend overrides. */
function durationList(
  text: string | undefined,
  fallback: string,
  flag: string,
): { durationMs: number; durationsMs: Partial<Record<BackendVariant, number>> } {
  let durationMs = parseDuration(fallback, flag);
  const durationsMs: Partial<Record<BackendVariant, number>> = {};
  for (const item of (text ?? '').split(',').filter(Boolean)) {
    const [backend, value] = item.includes('=') ? item.split('=') : [undefined, item];
    if (backend === undefined) durationMs = parseDuration(value!, flag);
    else if (isBackendVariant(backend))
      durationsMs[backend] = parseDuration(value!, `${flag} (for ${backend})`);
    else throw new UsageError(`unknown backend ${JSON.stringify(backend)} in ${flag}`);
  }
  return { durationMs, durationsMs };
}
