#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runCampaign } from './campaign.js';
import { LOCK_SEGMENT_NEMESES } from './lock-segment.js';
import { NEMESES } from './nemeses.js';
import { mergeReports, renderMarkdown, writeReport } from './report.js';
import { parseDurationMs } from './time.js';
import { BACKENDS, type BackendVariant, isBackendVariant } from './topology.js';

const USAGE = `Usage: dlm-faults [options]   (from the repo: pnpm --filter @dlm/faults faults -- [options])

Runs a fenced read-modify-write workload in separate processes against a dlm server, injects
faults, checks the history (S1-S6, L1, L4) and writes a report (Markdown + JSON).

  --backend LIST        ${BACKENDS.join(', ')} or all (default all)
  --nemesis LIST        nemeses to run, one segment each, or all (default: all that apply):
                        ${NEMESES.map((n) => n.name).join(', ')}
  --duration D          faults per segment, e.g. 30s, 2m (default 30s); per backend with
                        BACKEND=D items: --duration 30s,embedded=60s
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
  --lin-duration D      faults per linearizability segment (default 6s)
  --short               the CI campaign: one or two nemeses per backend, 15 s each, negative
                        control, and a linearizability segment per backend
  --out DIR             where the report goes (default apps/faults/results)
  --label NAME          report file name (default campaign-<time>)
  --history-dir DIR     keep the histories there (default: a temp dir, removed at exit)
  --merge A.json,B.json no campaign: merge the JSON reports of earlier runs (--out, --label)
  -h, --help

Exit status: 0 when no unexpected violation was found (and the negative control, if run, was
detected), 1 otherwise, 2 on bad flags.`;

/**
 * The short campaign's linearizability segments: a dlm server killed while a second one on
 * the same backend serves on (embedded: one server, restarted on its data dir).
 */
const SHORT_LOCK_PLAN = ['server-kill'];

/** The short campaign CI runs: at least one nemesis per backend. */
const SHORT_PLAN: Record<BackendVariant, string[]> = {
  embedded: ['client-pause', 'server-kill'],
  redis: ['backend-kill', 'backend-clock-back'],
  'redis-noaof': ['backend-kill'],
  redlock: ['backend-kill', 'majority-kill'],
  etcd: ['leader-kill'],
  zookeeper: ['leader-kill'],
  postgres: ['backend-kill'],
};

function fail(message: string): never {
  process.stderr.write(`dlm-faults: ${message}\n\n${USAGE}\n`);
  process.exit(2);
}

function positive(text: string | undefined, fallback: number, flag: string): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value <= 0) fail(`${flag} must be a positive integer`);
  return value;
}

const OPTIONS = {
  backend: { type: 'string' },
  nemesis: { type: 'string' },
  duration: { type: 'string' },
  'ttl-ms': { type: 'string' },
  workers: { type: 'string' },
  meddlers: { type: 'string' },
  keys: { type: 'string' },
  'l1-bound-ms': { type: 'string' },
  'l4-bound-ms': { type: 'string' },
  'negative-control': { type: 'boolean' },
  'no-fencing': { type: 'boolean' },
  short: { type: 'boolean' },
  lin: { type: 'string' },
  'lin-duration': { type: 'string' },
  out: { type: 'string' },
  label: { type: 'string' },
  'history-dir': { type: 'string' },
  merge: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;
let values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];
try {
  ({ values } = parseArgs({
    options: OPTIONS,
    // `pnpm faults -- --backend x` passes the `--` through.
    args: process.argv.slice(2).filter((arg) => arg !== '--'),
  }));
} catch (error) {
  fail((error as Error).message);
}
if (values.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}

const label =
  values.label ??
  `${values.short ? 'short' : values.merge ? 'merged' : 'campaign'}-${new Date().toISOString().replace(/[:.]/g, '-')}`;
const out = values.out ?? fileURLToPath(new URL('../results/', import.meta.url));
const log = (line: string) =>
  process.stderr.write(`[faults ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

if (values.merge) {
  const merged = mergeReports(values.merge.split(',').map((file) => readFileSync(file, 'utf8')));
  const files = writeReport(merged, out, label);
  process.stdout.write(renderMarkdown(merged));
  log(`report: ${files.markdown} and ${files.json}`);
  process.exit(merged.passed ? 0 : 1);
}

const short = values.short === true;
const backendList =
  !values.backend || values.backend === 'all' ? [...BACKENDS] : values.backend.split(',');
for (const backend of backendList) {
  if (!isBackendVariant(backend)) fail(`unknown backend ${JSON.stringify(backend)}`);
}
const backends = backendList as BackendVariant[];
const nemesisList =
  !values.nemesis || values.nemesis === 'all' ? ('all' as const) : values.nemesis.split(',');
if (nemesisList !== 'all') {
  for (const name of nemesisList) {
    if (!NEMESES.some((n) => n.name === name)) fail(`unknown nemesis ${JSON.stringify(name)}`);
  }
}
const lockList = values.lin ? values.lin.split(',') : short ? SHORT_LOCK_PLAN : [];
for (const name of lockList) {
  if (!LOCK_SEGMENT_NEMESES.has(name)) {
    fail(`nemesis ${JSON.stringify(name)} does not apply to a linearizability segment`);
  }
}
let lockDurationMs = 6_000;
try {
  if (values['lin-duration']) lockDurationMs = parseDurationMs(values['lin-duration']);
} catch (error) {
  fail((error as Error).message);
}
// `--duration 30s,embedded=60s`: a default and per-backend overrides.
let durationMs = parseDurationMs(short ? '15s' : '30s');
const durationsMs: Partial<Record<BackendVariant, number>> = {};
try {
  for (const item of (values.duration ?? '').split(',').filter(Boolean)) {
    const [backend, text] = item.includes('=') ? item.split('=') : [undefined, item];
    if (backend === undefined) durationMs = parseDurationMs(text!);
    else if (isBackendVariant(backend)) durationsMs[backend] = parseDurationMs(text!);
    else fail(`unknown backend ${JSON.stringify(backend)} in --duration`);
  }
} catch (error) {
  fail((error as Error).message);
}

const result = await runCampaign({
  backends,
  // `--lin` alone runs only linearizability segments.
  nemeses: (backend) =>
    short && !values.nemesis
      ? SHORT_PLAN[backend]
      : values.lin && !values.nemesis
        ? []
        : nemesisList,
  durationMs,
  durationsMs,
  lockNemeses: () => lockList,
  lockDurationMs,
  ttlMs: positive(values['ttl-ms'], 2_000, '--ttl-ms'),
  workers: positive(values.workers, 3, '--workers'),
  meddlers: values.meddlers === '0' ? 0 : positive(values.meddlers, 1, '--meddlers'),
  keys: positive(values.keys, 2, '--keys'),
  l1BoundMs: positive(values['l1-bound-ms'], 2_000, '--l1-bound-ms'),
  l4BoundMs: positive(values['l4-bound-ms'], 1_000, '--l4-bound-ms'),
  fencing: values['no-fencing'] !== true,
  negativeControl: short || values['negative-control'] === true,
  ...(values['history-dir'] ? { historyDir: values['history-dir'] } : {}),
  log,
});
const files = writeReport(result, out, label);
process.stdout.write(renderMarkdown(result));
log(`report: ${files.markdown} and ${files.json}`);
process.exit(result.passed ? 0 : 1);
