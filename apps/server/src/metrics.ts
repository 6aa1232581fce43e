import { getOrCreate, type LockMode } from '@dlm/core';
import {
  Counter,
  collectDefaultMetrics,
  Gauge,
  type Registry as PromRegistry,
  Registry,
} from 'prom-client';
import {
  type CounterSeries,
  fastCounter,
  fastHistogram,
  type HistogramSeries,
} from './fast-metric.js';

/** A backend primitive with a `dlm_backend_*` series (see `lock-observer.ts`). */
export type BackendOperation = 'tryAcquire' | 'release' | 'extend' | 'inspect' | 'revoke' | 'list';
/** Every `BackendOperation`, in the order its series are bound. */
export const BACKEND_OPERATIONS: readonly BackendOperation[] = [
  'tryAcquire',
  'release',
  'extend',
  'inspect',
  'revoke',
  'list',
];

/** How a waiting acquire (`waitMs` > 0) ended. */
export type WaitOutcome = 'granted' | 'timeout' | 'cancelled' | 'error';
/** How a lease granted through this server ended. */
export type HoldEnd = 'released' | 'expired' | 'revoked';

/**
 * Why the server refused a WebSocket upgrade or ended a connection itself: bad credentials, an
 * origin not allowed, a connection limit, no hello in time, a message rate far over the limit,
 * a peer that stopped reading, or one that stopped answering pings.
 */
export type ConnectionRejection =
  | 'unauthenticated'
  | 'origin'
  | 'address_limit'
  | 'connection_limit'
  | 'hello_timeout'
  | 'message_rate'
  | 'slow_reader'
  | 'no_pong';

const REJECTIONS: readonly ConnectionRejection[] = [
  'unauthenticated',
  'origin',
  'address_limit',
  'connection_limit',
  'hello_timeout',
  'message_rate',
  'slow_reader',
  'no_pong',
];

/** Read at scrape time, so that gauges cost nothing on the request path. */
export interface GaugeSources {
  sessions(): number;
  heldLocks(): number;
  /** Of `heldLocks`, the leases held shared (readers, semaphore permits). */
  sharedHeld(): number;
  waiters(): number;
  /** 1 while the backend answers (what `/readyz` says), else 0. */
  backendUp(): number;
}

/**
 * The server's Prometheus metrics. Every label set is bound once (at start or on first use)
 * and kept, so recording a request allocates nothing.
 */
export interface ServerMetrics {
  /** `text/plain; version=0.0.4` */
  readonly contentType: string;
  /** The Prometheus text exposition: this server's metrics and the process's. */
  render(): Promise<string>;
  /** An answered request: method (`invalid` for a frame without one), `OK` or the error code. */
  request(method: string, code: string): void;
  /** Answer time of a try-lock acquire, a release or an extend. */
  latency(method: TimedMethod, seconds: number): void;
  /** How long an acquire with `waitMs` > 0 took to be granted or to give up. */
  wait(outcome: WaitOutcome, seconds: number): void;
  /** How long a lease granted through this server was held. */
  hold(end: HoldEnd, seconds: number): void;
  /** A `lock.lost` sent to a holder's session (`maxHold`: also counted as a lease held to its cap). */
  lost(reason: LostReason): void;
  /**
   * A release request: `asked` through this server (`lock.requestRelease`, or an acquire with
   * `requestRelease` that had to wait), or `delivered`: heard by a lease followed here.
   */
  releaseRequest(event: ReleaseRequestEvent): void;
  /** An acquire answered LOCK_HELD because the name was in its lock-delay. */
  lockDelayed(): void;
  /** A lease granted (or re-acquired) through this server, in `mode`. */
  granted(mode: LockMode): void;
  backend(operation: BackendOperation, seconds: number, failed: boolean): void;
  /** A connection refused at the upgrade or ended by the server for `reason`. */
  connectionEnded(reason: ConnectionRejection): void;
  /**
   * Where the gauges read their values at scrape time. Bound once the parts they read exist
   * (the lock service, the feed, the sessions), which themselves report to these metrics.
   */
  bindGauges(sources: GaugeSources): void;
}

export type TimedMethod = 'lock.acquire' | 'lock.release' | 'lock.extend';

const TIMED_METHODS: readonly TimedMethod[] = ['lock.acquire', 'lock.release', 'lock.extend'];
const WAIT_OUTCOMES: readonly WaitOutcome[] = ['granted', 'timeout', 'cancelled', 'error'];
const HOLD_ENDS: readonly HoldEnd[] = ['released', 'expired', 'revoked'];
/** The two sides of a release request that a server sees (see `ServerMetrics.releaseRequest`). */
export type ReleaseRequestEvent = 'asked' | 'delivered';
const RELEASE_REQUEST_EVENTS: readonly ReleaseRequestEvent[] = ['asked', 'delivered'];

/** Why a lease held through this server ended other than by its holder's release. */
export type LostReason = 'expired' | 'revoked' | 'maxHold';
const LOST_REASONS: readonly LostReason[] = ['expired', 'revoked', 'maxHold'];
const LOCK_MODES: readonly LockMode[] = ['exclusive', 'shared'];

const LATENCY_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];
const WAIT_BUCKETS = [0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const HOLD_BUCKETS = [0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14_400, 86_400];

// Node's own metrics (CPU, memory, event loop lag, GC, handles) describe the process, not one
// server in it: one registry for them per process, however many servers a test starts.
let processRegistry: PromRegistry | undefined;
function processMetrics(): PromRegistry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/** Every gauge reads 0 until `bindGauges` says where its value comes from. */
const NO_GAUGES: GaugeSources = {
  sessions: () => 0,
  heldLocks: () => 0,
  sharedHeld: () => 0,
  waiters: () => 0,
  backendUp: () => 0,
};

/** The gauges, in exposition order: each reads its source at scrape time. */
const GAUGES: ReadonlyArray<{ name: string; help: string; source: keyof GaugeSources }> = [
  { name: 'dlm_sessions', help: 'Open WebSocket sessions.', source: 'sessions' },
  {
    name: 'dlm_locks_held',
    help: 'Locks currently held through this server.',
    source: 'heldLocks',
  },
  {
    name: 'dlm_backend_up',
    help: '1 while the backend answers within the readiness bound (what /readyz says), else 0.',
    source: 'backendUp',
  },
  {
    name: 'dlm_lock_waiters',
    help: 'Acquires currently queued on this server.',
    source: 'waiters',
  },
];

function registerGauges(registry: PromRegistry, sources: () => GaugeSources): void {
  for (const { name, help, source } of GAUGES) {
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(sources()[source]());
      },
    });
  }
  new Gauge({
    name: 'dlm_lock_holders',
    help: 'Leases currently held through this server, by mode (exclusive; shared: readers and semaphore permits).',
    labelNames: ['mode'],
    registers: [registry],
    collect() {
      const { heldLocks, sharedHeld } = sources();
      const shared = sharedHeld();
      this.labels('shared').set(shared);
      this.labels('exclusive').set(Math.max(0, heldLocks() - shared));
    },
  });
}

/** A series for each value of a closed label set, bound up front. */
function seriesBy<Value extends string, Series>(
  values: readonly Value[],
  bind: (value: Value) => Series,
): Record<Value, Series> {
  return Object.fromEntries(values.map((value) => [value, bind(value)])) as Record<Value, Series>;
}

/**
 * A prom-client counter with one label (the slow-path counters), with a series bound for each
 * of `values` and set to 0: it exists from the first scrape.
 */
function zeroedCounter<Value extends string>(
  registry: PromRegistry,
  values: readonly Value[],
  options: { name: string; help: string; labelName: string },
): Record<Value, CounterSeries> {
  const { name, help, labelName } = options;
  const counter = new Counter({ name, help, labelNames: [labelName], registers: [registry] });
  return seriesBy(values, (value) => {
    const child = counter.labels(value);
    child.inc(0);
    return child;
  });
}

/** A {@link fastHistogram} with a series bound for each of `values` (shown once observed). */
function histogramBy<Value extends string>(
  registry: PromRegistry,
  values: readonly Value[],
  options: { name: string; help: string; labelName: string; buckets: readonly number[] },
): Record<Value, HistogramSeries> {
  const histogram = fastHistogram(registry, options);
  return seriesBy(values, (value) => histogram.labels(value));
}

function registerBuildInfo(registry: PromRegistry, version: string, backend: string): void {
  new Gauge({
    name: 'dlm_build_info',
    help: 'Always 1; the labels say which version serves which backend.',
    labelNames: ['version', 'backend'] as const,
    registers: [registry],
  })
    .labels(version, backend)
    .set(1);
}

/** The series of requests: each one answered, and the time to answer the timed ones. */
function requestSeries(registry: PromRegistry) {
  return {
    // On every request: series bound once, no label hashing per call.
    requests: fastCounter(registry, {
      name: 'dlm_requests_total',
      help: 'Protocol requests answered, by method and result code (OK or the error code).',
      labelNames: ['method', 'code'],
    }),
    latencyBy: histogramBy(registry, TIMED_METHODS, {
      name: 'dlm_request_duration_seconds',
      help: 'Time to answer lock.acquire (try-locks, waitMs 0), lock.release and lock.extend.',
      labelName: 'method',
      buckets: LATENCY_BUCKETS,
    }),
  };
}

/** The series of leases granted through this server: how long each waited, was held, was lost. */
function leaseSeries(registry: PromRegistry) {
  return {
    waitBy: histogramBy(registry, WAIT_OUTCOMES, {
      name: 'dlm_lock_wait_seconds',
      help: 'Time an acquire with waitMs > 0 waited, by outcome (granted, timeout, cancelled, error).',
      labelName: 'outcome',
      buckets: WAIT_BUCKETS,
    }),
    holdBy: histogramBy(registry, HOLD_ENDS, {
      name: 'dlm_lock_hold_seconds',
      help: 'Time a lease granted through this server was held, by how it ended.',
      labelName: 'end',
      buckets: HOLD_BUCKETS,
    }),
    lostBy: zeroedCounter(registry, LOST_REASONS, {
      name: 'dlm_locks_lost_total',
      help: 'lock.lost notifications sent to holders, by reason (expired, revoked, maxHold).',
      labelName: 'reason',
    }),
  };
}

/** The series of backend calls, by operation: their latency and failures. */
function backendSeries(registry: PromRegistry) {
  return {
    durationBy: histogramBy(registry, BACKEND_OPERATIONS, {
      name: 'dlm_backend_duration_seconds',
      help: 'Backend call latency, by operation.',
      labelName: 'operation',
      buckets: LATENCY_BUCKETS,
    }),
    errorsBy: zeroedCounter(registry, BACKEND_OPERATIONS, {
      name: 'dlm_backend_errors_total',
      help: 'Backend calls that failed, by operation.',
      labelName: 'operation',
    }),
  };
}

export function createMetrics(options: { version: string; backend: string }): ServerMetrics {
  const registry = new Registry();
  let gauges = NO_GAUGES;

  // Registered in exposition order. The label values are closed sets, so all are bound up front
  // and the counters' series exist (at 0) from the first scrape; request counters bind per
  // (method, code) pair on first use, since most pairs never occur.
  registerBuildInfo(registry, options.version, options.backend);
  const { requests, latencyBy } = requestSeries(registry);
  const { waitBy, holdBy, lostBy } = leaseSeries(registry);
  const backendBy = backendSeries(registry);
  const rejectionBy = zeroedCounter(registry, REJECTIONS, {
    name: 'dlm_connections_rejected_total',
    help: 'WebSocket connections refused at the upgrade or ended by the server, by reason.',
    labelName: 'reason',
  });
  registerGauges(registry, () => gauges);
  const grantsBy = zeroedCounter(registry, LOCK_MODES, {
    name: 'dlm_lock_grants_total',
    help: 'Leases granted (or re-acquired) through this server, by mode.',
    labelName: 'mode',
  });
  const releaseRequestsBy = zeroedCounter(registry, RELEASE_REQUEST_EVENTS, {
    name: 'dlm_release_requests_total',
    help: 'Release requests asked through this server (that found holders) and release requests heard by leases held through this server, by event (asked, delivered).',
    labelName: 'event',
  });
  const lockDelayed = new Counter({
    name: 'dlm_lock_delay_refusals_total',
    help: 'Acquires answered LOCK_HELD because the name was in its lock-delay (its last lease, asked with lockDelayMs, ended by expiry or revocation).',
    registers: [registry],
  });
  const maxHoldEnds = new Counter({
    name: 'dlm_leases_max_hold_total',
    help: 'Leases held through this server that ended at their cap on holding (acquired with maxHoldMs, extended up to it): stuck or forgetful holders.',
    registers: [registry],
  });
  const requestBy = new Map<string, Map<string, CounterSeries>>();

  return {
    contentType: registry.contentType,
    async render() {
      return `${await processMetrics().metrics()}\n${await registry.metrics()}`;
    },
    request(method, code) {
      const byCode = getOrCreate(requestBy, method, () => new Map());
      getOrCreate(byCode, code, () => requests.labels(method, code)).inc();
    },
    latency(method, seconds) {
      latencyBy[method].observe(seconds);
    },
    wait(outcome, seconds) {
      waitBy[outcome].observe(seconds);
    },
    hold(end, seconds) {
      holdBy[end].observe(seconds);
    },
    lost(reason) {
      lostBy[reason].inc();
      if (reason === 'maxHold') maxHoldEnds.inc();
    },
    releaseRequest(event) {
      releaseRequestsBy[event].inc();
    },
    lockDelayed() {
      lockDelayed.inc();
    },
    granted(mode) {
      grantsBy[mode].inc();
    },
    backend(operation, seconds, failed) {
      backendBy.durationBy[operation].observe(seconds);
      if (failed) backendBy.errorsBy[operation].inc();
    },
    connectionEnded(reason) {
      rejectionBy[reason].inc();
    },
    bindGauges(sources) {
      gauges = sources;
    },
  };
}
