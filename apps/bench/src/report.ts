import type { Metrics } from './metrics.js';
import { PAIRS } from './targets.js';
import type { ScaleResult } from './workloads/scale.js';

/**
 * The table (dlm per adapter, each next to its peers and the ratio) and the targets,
 * checked against the figures. Ratios are always dlm ÷ peer; the arrow in a column's title says
 * which direction is better.
 */

interface Column {
  key: keyof Metrics;
  title: string;
  better: 'lower' | 'higher' | 'none';
  format: (value: number) => string;
}

export function formatMs(value: number): string {
  if (!Number.isFinite(value)) return '–';
  if (value < 1) return value.toFixed(3);
  if (value < 10) return value.toFixed(2);
  if (value < 100) return value.toFixed(1);
  return value.toFixed(0);
}

const rate = (value: number) => (Number.isFinite(value) ? Math.round(value).toString() : '–');
const plain = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : '–');
const count = (value: number) => (Number.isFinite(value) ? String(value) : '–');

export const COLUMNS: Column[] = [
  { key: 'uncontendedAcquireP50', title: '1 acq p50 ↓', better: 'lower', format: formatMs },
  { key: 'uncontendedAcquireP99', title: '1 acq p99 ↓', better: 'lower', format: formatMs },
  { key: 'uncontendedReleaseP50', title: '1 rel p50 ↓', better: 'lower', format: formatMs },
  { key: 'uncontendedReleaseP99', title: '1 rel p99 ↓', better: 'lower', format: formatMs },
  { key: 'throughputPairsPerSecond', title: '2 pairs/s ↑', better: 'higher', format: rate },
  { key: 'throughputPairP50', title: '2 pair p50 ↓', better: 'lower', format: formatMs },
  { key: 'throughputPairP99', title: '2 pair p99 ↓', better: 'lower', format: formatMs },
  { key: 'throughputAcquireP99', title: '2 acq p99 ↓', better: 'lower', format: formatMs },
  { key: 'sharedPairsPerSecond', title: '5 pairs/s ↑', better: 'higher', format: rate },
  { key: 'sharedPairP99', title: '5 pair p99 ↓', better: 'lower', format: formatMs },
  { key: 'sharedAcquireP50', title: '5 acq p50 ↓', better: 'lower', format: formatMs },
  { key: 'contentionGrantsPerSecond', title: '3 grants/s ↑', better: 'higher', format: rate },
  { key: 'contentionHandoffsPerSecond', title: '3 handoffs/s ↑', better: 'higher', format: rate },
  { key: 'contentionHandoffP50', title: '3 handoff p50 ↓', better: 'lower', format: formatMs },
  { key: 'contentionHandoffP99', title: '3 handoff p99 ↓', better: 'lower', format: formatMs },
  { key: 'contentionFairness', title: '3 fairness ↑', better: 'higher', format: plain },
  { key: 'contentionViolations', title: '3 violations', better: 'none', format: count },
  { key: 'errors', title: 'errors', better: 'none', format: count },
];

/** Where the CPU went in workload 2, per acquire+release pair. */
export const CPU_COLUMNS: Column[] = [
  { key: 'throughputPairsPerSecond', title: 'pairs/s', better: 'higher', format: rate },
  { key: 'throughputClientCpuUs', title: 'client µs/pair', better: 'lower', format: rate },
  { key: 'throughputServerCpuUs', title: 'dlm server µs/pair', better: 'lower', format: rate },
  { key: 'throughputBackendCpuUs', title: 'services µs/pair', better: 'lower', format: rate },
];

/**
 * Workloads 6 and 7, each column with the peer its ratio is taken against: redis-semaphore's
 * `Semaphore` for the semaphore, the ZooKeeper read-write recipe for the read-write lock.
 */
export const SHARED_COLUMNS: (Column & { peer: string })[] = [
  {
    key: 'semaphoreGrantsPerSecond',
    title: '6 grants/s ↑',
    better: 'higher',
    format: rate,
    peer: 'peer-redis-semaphore',
  },
  {
    key: 'semaphoreAcquireP50',
    title: '6 acq p50 ↓',
    better: 'lower',
    format: formatMs,
    peer: 'peer-redis-semaphore',
  },
  {
    key: 'semaphoreAcquireP99',
    title: '6 acq p99 ↓',
    better: 'lower',
    format: formatMs,
    peer: 'peer-redis-semaphore',
  },
  {
    key: 'readWriteGrantsPerSecond',
    title: '7 grants/s ↑',
    better: 'higher',
    format: rate,
    peer: 'peer-zk-rwlock',
  },
  {
    key: 'readWriteReadP50',
    title: '7 read acq p50 ↓',
    better: 'lower',
    format: formatMs,
    peer: 'peer-zk-rwlock',
  },
  {
    key: 'readWriteReadP99',
    title: '7 read acq p99 ↓',
    better: 'lower',
    format: formatMs,
    peer: 'peer-zk-rwlock',
  },
  {
    key: 'readWriteWriteP99',
    title: '7 write acq p99 ↓',
    better: 'lower',
    format: formatMs,
    peer: 'peer-zk-rwlock',
  },
  {
    key: 'sharedModeViolations',
    title: '6+7 violations',
    better: 'none',
    format: count,
    peer: '',
  },
];

const SHARED_PEERS = ['peer-redis-semaphore', 'peer-zk-rwlock'];

/**
 * Rows of workloads 6 and 7: the two peers first, then every dlm target that ran either, with
 * a ratio row under it (each column against its own peer).
 */
export function sharedTableRows(figures: Map<string, TargetFigures>): string[][] {
  const columns = SHARED_COLUMNS;
  const rows: string[][] = [['target', ...columns.map((column) => column.title)]];
  const ran = (f: TargetFigures) =>
    Number.isFinite(f.metrics.semaphoreGrantsPerSecond) ||
    Number.isFinite(f.metrics.readWriteGrantsPerSecond);
  const cells = (f: TargetFigures) =>
    columns.map((column) =>
      column.better === 'none' || Number.isFinite(f.metrics[column.key])
        ? column.format(f.metrics[column.key])
        : '–',
    );
  for (const id of SHARED_PEERS) {
    const peer = figures.get(id);
    if (peer && ran(peer)) rows.push([peer.label, ...cells(peer)]);
  }
  for (const f of figures.values()) {
    if (SHARED_PEERS.includes(f.id) || !ran(f) || !f.id.match(/^(dlm|lib)-/)) continue;
    rows.push([f.label, ...cells(f)]);
    rows.push([
      '  dlm ÷ peer',
      ...columns.map((column) => {
        const peer = figures.get(column.peer);
        return column.better === 'none' || !peer
          ? ''
          : ratio(f.metrics[column.key], peer.metrics[column.key]);
      }),
    ]);
  }
  return rows;
}

export interface TargetFigures {
  id: string;
  label: string;
  metrics: Metrics;
}

export function ratio(dlm: number, peer: number): string {
  if (!Number.isFinite(dlm) || !Number.isFinite(peer) || peer === 0) return '–';
  return `${(dlm / peer).toFixed(2)}×`;
}

/** Rows of cells: a header, then per dlm adapter its row, and per peer the peer's row and the ratio. */
export function tableRows(
  figures: Map<string, TargetFigures>,
  columns: Column[] = COLUMNS,
): string[][] {
  const rows: string[][] = [['target', ...columns.map((column) => column.title)]];
  const cells = (f: TargetFigures) => columns.map((column) => column.format(f.metrics[column.key]));
  const shown = new Set<string>();
  for (const pair of PAIRS) {
    const dlm = figures.get(pair.dlm);
    if (!dlm) continue;
    rows.push([dlm.label, ...cells(dlm)]);
    shown.add(dlm.id);
    for (const peerId of pair.peers) {
      const peer = figures.get(peerId);
      if (!peer) continue;
      shown.add(peer.id);
      rows.push([`  vs ${peer.label}`, ...cells(peer)]);
      rows.push([
        '  dlm ÷ peer',
        ...columns.map((column) =>
          column.better === 'none' ? '' : ratio(dlm.metrics[column.key], peer.metrics[column.key]),
        ),
      ]);
    }
  }
  // Peers whose dlm counterpart was not run (with --only) still get their row, unless they ran
  // none of these columns' workloads (the read-write recipe runs only workload 7).
  for (const f of figures.values()) {
    const any = columns.some((c) => c.better !== 'none' && Number.isFinite(f.metrics[c.key]));
    if (!shown.has(f.id) && any) rows.push([f.label, ...cells(f)]);
  }
  return rows;
}

export function renderText(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => [...(row[i] ?? '')].length)));
  const pad = (cell: string, i: number) =>
    i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!);
  const lines = rows.map((row) => row.map(pad).join('  '));
  lines.splice(1, 0, widths.map((width) => '─'.repeat(width)).join('  '));
  return lines.join('\n');
}

export function renderMarkdown(rows: string[][]): string {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  const [header, ...body] = rows;
  return [
    `| ${header!.map(cell).join(' | ')} |`,
    `| ${header!.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
    ...body.map((row) => `| ${row.map(cell).join(' | ')} |`),
  ].join('\n');
}

export interface TargetCheck {
  /** The wording, shortened. */
  target: string;
  /** What was measured, e.g. `0.21 ms vs 0.15 ms (1.40×)`. */
  measured: string;
  /** null when the figures needed were not measured in this run. */
  met: boolean | null;
}

export type Format = (value: number) => string;

/** Adds checks of figures to `checks`: a ratio of two targets' figure, or one target's figure. */
export function checker(figures: Map<string, TargetFigures>, checks: TargetCheck[]) {
  const get = (id: string, key: keyof Metrics) => figures.get(id)?.metrics[key] ?? Number.NaN;
  const known = (...values: number[]) => values.every(Number.isFinite);
  const compare = (
    target: string,
    dlmId: string,
    peerId: string,
    key: keyof Metrics,
    test: (dlm: number, peer: number) => boolean,
    format: Format,
    /** The peer's figure to compare with, when it is another than the dlm target's. */
    peerKey: keyof Metrics = key,
  ) => {
    const dlm = get(dlmId, key);
    const peer = get(peerId, peerKey);
    checks.push({
      target,
      measured: known(dlm, peer)
        ? `${format(dlm)} vs ${format(peer)} (${ratio(dlm, peer)})`
        : 'not measured',
      met: known(dlm, peer) ? test(dlm, peer) : null,
    });
  };
  const absolute = (
    target: string,
    id: string,
    key: keyof Metrics,
    test: (value: number) => boolean,
    format: Format,
  ) => {
    const value = get(id, key);
    checks.push({
      target,
      measured: known(value) ? format(value) : 'not measured',
      met: known(value) ? test(value) : null,
    });
  };
  return { get, known, compare, absolute };
}

export const ms: Format = (value) => `${formatMs(value)} ms`;
export const perSecond: Format = (value) => `${rate(value)}/s`;

/** Checks the targets against the figures (medians over the runs). */
export function checkTargets(
  figures: Map<string, TargetFigures>,
  scale: ScaleResult | undefined,
): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const { compare, absolute } = checker(figures, checks);
  // Issue 5 is about the server: the library path's targets are issue 21's.
  const serverPairs = PAIRS.filter((pair) => pair.dlm.startsWith('dlm-'));
  for (const [id, name] of [
    ['dlm-embedded-memory', 'embedded (memory)'],
    ['dlm-embedded-disk', 'embedded (data dir)'],
  ] as const) {
    compare(
      `${name}: uncontended acquire p50 ≤ raw Redis SET NX`,
      id,
      'peer-raw-redis',
      'uncontendedAcquireP50',
      (d, p) => d <= p,
      ms,
    );
    compare(
      `${name}: throughput ≥ raw Redis pairs/s`,
      id,
      'peer-raw-redis',
      'throughputPairsPerSecond',
      (d, p) => d >= p,
      perSecond,
    );
    absolute(
      `${name}: ≥ 10,000 handoffs/s under contention`,
      id,
      'contentionHandoffsPerSecond',
      (v) => v >= 10_000,
      perSecond,
    );
  }
  compare(
    'redis: acquire p50 ≤ 2.5× raw Redis',
    'dlm-redis',
    'peer-raw-redis',
    'uncontendedAcquireP50',
    (d, p) => d <= 2.5 * p,
    ms,
  );
  compare(
    'redis: throughput ≥ 0.7× raw Redis',
    'dlm-redis',
    'peer-raw-redis',
    'throughputPairsPerSecond',
    (d, p) => d >= 0.7 * p,
    perSecond,
  );
  absolute('redis: handoff p99 ≤ 2 ms', 'dlm-redis', 'contentionHandoffP99', (v) => v <= 2, ms);
  compare(
    "redis: handoffs/s ≥ 10× redis-semaphore's",
    'dlm-redis',
    'peer-redis-semaphore',
    'contentionHandoffsPerSecond',
    (d, p) => d >= 10 * p,
    perSecond,
  );
  for (const [id, peer, name] of [
    ['dlm-etcd', 'peer-etcd3-lock', 'etcd'],
    ['dlm-zookeeper', 'peer-zk-recipe', 'zookeeper'],
  ] as const) {
    compare(
      `${name}: throughput ≥ the direct peer`,
      id,
      peer,
      'throughputPairsPerSecond',
      (d, p) => d >= p,
      perSecond,
    );
    compare(
      `${name}: handoffs/s ≥ the direct peer`,
      id,
      peer,
      'contentionHandoffsPerSecond',
      (d, p) => d >= p,
      perSecond,
    );
  }
  for (const pair of serverPairs) {
    const label = figures.get(pair.dlm)?.label ?? pair.dlm;
    absolute(
      `${label}: acquire p99 < 10 ms at 32 concurrent clients`,
      pair.dlm,
      'throughputAcquireP99',
      (v) => v < 10,
      ms,
    );
  }
  for (const pair of serverPairs) {
    if (pair.dlm === 'dlm-redlock') continue; // exempt in the issue: no queue across nodes
    const label = figures.get(pair.dlm)?.label ?? pair.dlm;
    absolute(`${label}: fairness ≥ 0.8`, pair.dlm, 'contentionFairness', (v) => v >= 0.8, plain);
  }
  for (const f of figures.values()) {
    if (f.metrics.contentionViolations > 0) {
      checks.push({
        target: `${f.label}: mutual exclusion`,
        measured: `${f.metrics.contentionViolations} violations`,
        met: false,
      });
    }
  }
  if (scale) {
    checks.push({
      target: `scale: ${scale.sessions} sessions + ${scale.locks} locks in ≤ 512 MiB resident`,
      measured: `${scale.rssMiB.full.toFixed(0)} MiB`,
      met: scale.rssMiB.full <= 512,
    });
    checks.push({
      target: `scale: acquire p99 at ${scale.locks} locks ≤ 1.5× p99 at ${scale.probeAtLocks}`,
      measured: `${ms(scale.acquireAtFull.p99)} vs ${ms(scale.acquireAtProbe.p99)} (${scale.p99Ratio.toFixed(2)}×)`,
      met: scale.p99Ratio <= 1.5,
    });
  } else {
    checks.push({ target: 'scale targets', measured: 'not measured', met: null });
  }
  return checks;
}

export function renderChecks(checks: TargetCheck[], markdown: boolean): string {
  const mark = (met: boolean | null) => (met === null ? 'n/a' : met ? 'met' : 'MISSED');
  if (markdown) {
    return [
      '| target | measured (dlm vs peer) | |',
      '| --- | --- | --- |',
      ...checks.map((c) => `| ${c.target} | ${c.measured} | ${mark(c.met)} |`),
    ].join('\n');
  }
  const width = Math.max(...checks.map((c) => c.target.length));
  return checks
    .map((c) => `${mark(c.met).padEnd(6)} ${c.target.padEnd(width)}  ${c.measured}`)
    .join('\n');
}

export function renderScale(scale: ScaleResult): string[] {
  return [
    `sessions ${scale.sessions} (from ${scale.workers} client processes), locks held ${scale.locks}`,
    `server RSS: idle ${scale.rssMiB.idle.toFixed(1)} MiB, with sessions ${scale.rssMiB.sessions.toFixed(1)} MiB, at ${scale.probeAtLocks} locks ${scale.rssMiB.atProbe.toFixed(1)} MiB, with all locks ${scale.rssMiB.full.toFixed(1)} MiB`,
    `per session ${scale.perSessionKiB.toFixed(1)} KiB, per held lock ${scale.perLockBytes.toFixed(0)} B`,
    `acquire p50/p99: ${formatMs(scale.acquireAtProbe.p50)}/${formatMs(scale.acquireAtProbe.p99)} ms at ${scale.probeAtLocks} locks, ${formatMs(scale.acquireAtFull.p50)}/${formatMs(scale.acquireAtFull.p99)} ms with all locks held (p99 ratio ${scale.p99Ratio.toFixed(2)}×)`,
    `connecting took ${(scale.connectMs / 1000).toFixed(1)} s, acquiring ${(scale.acquireMs / 1000).toFixed(1)} s; errors ${scale.errors}`,
    ...(scale.recovery ? [renderRecovery(scale.recovery)] : []),
    ...scale.notes.map((note) => `note: ${note}`),
  ];
}

function renderRecovery(recovery: NonNullable<ScaleResult['recovery']>): string {
  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  return (
    `recovery (data dir, ${recovery.locks} locks from ${recovery.sessions} sessions, journal ${recovery.journalMiB.toFixed(1)} MiB, acquired in ${seconds(recovery.acquireMs)}): ` +
    `after kill -9, ready in ${seconds(recovery.readyMs)}, a held lock answered with its token in ${seconds(recovery.recoveryMs)} (recoveryMs ${Math.round(recovery.recoveryMs)}; ${recovery.checked} checked), RSS then ${recovery.rssMiB.toFixed(1)} MiB`
  );
}
