import type { Metric, Registry } from 'prom-client';

/** One label value's series of a {@link fastHistogram}: observing is a few array writes. */
export interface HistogramSeries {
  observe(value: number): void;
}

/** One label value combination's series of a {@link fastCounter}. */
export interface CounterSeries {
  inc(by?: number): void;
}

interface PromValue {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
}

/**
 * A histogram with one label, in the text format prom-client writes for its own: the hot path
 * (`observe`) hashes no label object and allocates nothing, where prom-client's labelled child
 * builds and hashes a label object on every call. A series shows from its first observation.
 */
export function fastHistogram(
  registry: Registry,
  options: { name: string; help: string; labelName: string; buckets: readonly number[] },
): { labels(value: string): HistogramSeries } {
  const { name, help, labelName } = options;
  const bounds = [...options.buckets].sort((a, b) => a - b);
  const series = new Map<string, { counts: Float64Array; sum: number; count: number }>();
  const metric = {
    name,
    help,
    type: 'histogram',
    aggregator: 'sum',
    async get() {
      const values: PromValue[] = [];
      for (const [labelValue, data] of series) {
        // Like prom-client's, a series shows once something was observed in it.
        if (data.count === 0) continue;
        const shared = { [labelName]: labelValue };
        let cumulative = 0;
        for (let index = 0; index < bounds.length; index++) {
          cumulative += data.counts[index]!;
          values.push({
            labels: { le: bounds[index]! },
            sharedLabels: shared,
            value: cumulative,
            metricName: `${name}_bucket`,
          });
        }
        values.push({
          labels: { le: '+Inf' },
          sharedLabels: shared,
          value: data.count,
          metricName: `${name}_bucket`,
        });
        values.push({ labels: shared, value: data.sum, metricName: `${name}_sum` });
        values.push({ labels: shared, value: data.count, metricName: `${name}_count` });
      }
      return { name: metric.name, help, type: 'histogram', aggregator: 'sum', values };
    },
    reset() {
      for (const data of series.values()) {
        data.counts.fill(0);
        data.sum = 0;
        data.count = 0;
      }
    },
  };
  registry.registerMetric(metric as unknown as Metric<string>);
  return {
    labels(value) {
      let data = series.get(value);
      if (!data) {
        data = { counts: new Float64Array(bounds.length), sum: 0, count: 0 };
        series.set(value, data);
      }
      const own = data;
      return {
        observe(observed) {
          if (!Number.isFinite(observed)) return;
          own.sum += observed;
          own.count += 1;
          for (let index = 0; index < bounds.length; index++) {
            if (observed <= bounds[index]!) {
              own.counts[index]! += 1;
              return;
            }
          }
        },
      };
    },
  };
}

/** A counter with fixed label names whose series are bound once and incremented cheaply. */
export function fastCounter(
  registry: Registry,
  options: { name: string; help: string; labelNames: readonly string[] },
): { labels(...values: string[]): CounterSeries } {
  const { name, help, labelNames } = options;
  const series = new Map<string, { labels: Record<string, string>; value: number }>();
  const metric = {
    name,
    help,
    type: 'counter',
    aggregator: 'sum',
    async get() {
      const values: PromValue[] = [];
      for (const data of series.values()) values.push({ labels: data.labels, value: data.value });
      return { name: metric.name, help, type: 'counter', aggregator: 'sum', values };
    },
    reset() {
      for (const data of series.values()) data.value = 0;
    },
  };
  registry.registerMetric(metric as unknown as Metric<string>);
  return {
    labels(...values) {
      const key = values.join('\u0000');
      let data = series.get(key);
      if (!data) {
        const labels: Record<string, string> = {};
        labelNames.forEach((labelName, index) => {
          labels[labelName] = values[index] ?? '';
        });
        data = { labels, value: 0 };
        series.set(key, data);
      }
      const own = data;
      return {
        inc(by = 1) {
          own.value += by;
        },
      };
    },
  };
}
