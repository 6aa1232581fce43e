// The dashboard's charts: plain SVG and HTML bars, drawn from what GET /v1/feed tells (see
// dashboard.js). No chart library: four small pictures do not need one.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 600;
const HEIGHT = 150;

/** The series of the rates chart, in drawing order. */
export const SERIES = [
  { key: 'grants', label: 'grants' },
  { key: 'releases', label: 'releases' },
  { key: 'expiries', label: 'expiries' },
  { key: 'waits', label: 'queued' },
];

/** Upper bounds (ms) of the duration buckets; the last bucket has none. */
const BUCKETS_MS = [10, 100, 1_000, 10_000, 60_000];
const BUCKET_LABELS = ['< 10 ms', '10–100 ms', '0.1–1 s', '1–10 s', '10–60 s', '≥ 1 min'];

function svg(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  return element;
}

/** A round number at or above `value`, for the top of an axis. */
function niceCeiling(value) {
  if (value <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

/**
 * Draws `rates` (per-second counts, oldest first, the last second still under way) as one line
 * per series, with the top of the scale in `scale` and the series in `legend`. The last complete second is the legend's figure; `data-total` on the SVG counts
 * every event in the window, so a test can see the picture move.
 */
export function drawRates(chart, scale, legend, rates) {
  const seconds = rates.grants.length;
  // The second under way is left out: it would always dip.
  const shown = Math.max(1, seconds - 1);
  let peak = 0;
  let total = 0;
  for (const { key } of SERIES) {
    for (let i = 0; i < shown; i += 1) {
      peak = Math.max(peak, rates[key][i]);
      total += rates[key][i];
    }
  }
  const top = niceCeiling(peak);
  const x = (i) => (shown === 1 ? WIDTH : (i / (shown - 1)) * WIDTH);
  const y = (value) => HEIGHT - 4 - (value / top) * (HEIGHT - 20);
  chart.replaceChildren(chart.querySelector('title'));
  for (const fraction of [0, 0.5, 1]) {
    const lineY = y(top * fraction);
    chart.append(svg('line', { x1: 0, x2: WIDTH, y1: lineY, y2: lineY, class: 'grid' }));
  }
  // The scale is HTML, not SVG text: the plot stretches to its box, text would stretch with it.
  scale.textContent = `${top}/s`;
  for (const { key } of SERIES) {
    const points = [];
    for (let i = 0; i < shown; i += 1)
      points.push(`${x(i).toFixed(1)},${y(rates[key][i]).toFixed(1)}`);
    chart.append(svg('polyline', { points: points.join(' '), class: `series ${key}` }));
  }
  chart.dataset.total = String(total);
  legend.replaceChildren(
    ...SERIES.map(({ key, label: name }) => {
      const item = document.createElement('li');
      item.className = key;
      item.dataset.series = key;
      item.textContent = `${rates[key][shown - 1] ?? 0} ${name}/s`;
      return item;
    }),
  );
}

function bucketOf(ms) {
  const index = BUCKETS_MS.findIndex((bound) => ms < bound);
  return index < 0 ? BUCKETS_MS.length : index;
}

/** One row of a bar list: a label, a bar `fraction` of the full width, and a figure. */
function barRow(label, fraction, figure, title) {
  const item = document.createElement('li');
  const name = document.createElement('span');
  name.className = 'label';
  name.textContent = label;
  if (title) name.title = title;
  const track = document.createElement('span');
  track.className = 'track';
  const bar = document.createElement('span');
  bar.className = 'bar';
  bar.style.width = `${Math.round(fraction * 1000) / 10}%`;
  track.append(bar);
  const value = document.createElement('span');
  value.className = 'value';
  value.textContent = figure;
  item.append(name, track, value);
  return item;
}

/** A histogram of durations (ms) in fixed buckets, as bars. */
export function drawDurations(list, durations) {
  const counts = BUCKET_LABELS.map(() => 0);
  for (const ms of durations) counts[bucketOf(ms)] += 1;
  const most = Math.max(1, ...counts);
  list.dataset.count = String(durations.length);
  list.replaceChildren(
    ...counts.map((count, i) => barRow(BUCKET_LABELS[i], count / most, String(count))),
  );
}

/**
 * The most contended names: `rows` are { name, waits, waitedMs, waiting }, drawn by queued
 * acquires, then by time waited; `formatElapsed` writes a duration.
 */
export function drawContended(list, rows, formatElapsed, limit = 5) {
  const top = [...rows]
    .filter((row) => row.waits > 0 || row.waiting > 0)
    .sort((a, b) => b.waits - a.waits || b.waitedMs - a.waitedMs || (a.name < b.name ? -1 : 1))
    .slice(0, limit);
  const most = Math.max(1, ...top.map((row) => row.waits));
  list.replaceChildren(
    ...top.map((row) => {
      const figure = `${row.waits} · ${formatElapsed(row.waitedMs)}${row.waiting ? ` · ${row.waiting} now` : ''}`;
      const item = barRow(row.name, row.waits / most, figure, row.name);
      item.dataset.name = row.name;
      return item;
    }),
  );
  if (top.length === 0) {
    const none = document.createElement('li');
    none.className = 'none';
    none.textContent = 'No acquire has queued lately.';
    list.append(none);
  }
}
