import { performance } from 'node:perf_hooks';
import {
  type Clock,
  formatToken,
  isDlmError,
  type Lease,
  type LockBackend,
  type LockObserver,
  type LockState,
  type LostEvent,
  type ReleaseRequestedEvent,
  type ReleaseRequestResult,
} from '@dlm/core';
import type { BackendHealth } from './backend-health.js';
import { withDeadline } from './deadline.js';
import type { Logger } from './logger.js';
import { BACKEND_OPERATIONS, type BackendOperation, type ServerMetrics } from './metrics.js';

/**
 * The server's one lock observer, passed to core's lock service: every grant, extend, release,
 * lost lease, queue length and backend call reaches the metrics, the log, `/readyz` (through
 * `health`) and the parts added with `add` (the lock feed), from here and nowhere else.
 */
export interface ServerObserver extends Required<LockObserver> {
  /**
   * Adds a part that hears every event after the metrics and the log: the feed, which needs the
   * service (its watch) and so exists only after the service this observer is given to.
   */
  add(part: LockObserver): void;
  /** Acquires queued on this server, all names together (the `dlm_lock_waiters` gauge). */
  totalWaiters(): number;
}

export interface ServerObserverOptions {
  metrics: ServerMetrics;
  logger: Logger;
  /** Told what each backend call found: a success or an UNAVAILABLE is news about the backend. */
  health: BackendHealth;
  backendKind: string;
}

/** The operations with a `dlm_backend_*` series (`acquireQueued` mostly measures a wait). */
const TIMED: ReadonlySet<string> = new Set(BACKEND_OPERATIONS);

export function createServerObserver(options: ServerObserverOptions): ServerObserver {
  const { metrics, logger, health } = options;
  const parts: LockObserver[] = [];
  // Only names with acquires queued: the gauge sums these at scrape time.
  const waiting = new Map<string, number>();
  const debug = logger.isLevelEnabled?.('debug') ?? true;

  function tell<K extends keyof LockObserver>(
    event: K,
    ...args: Parameters<NonNullable<LockObserver[K]>>
  ): void {
    for (const part of parts) {
      (part[event] as ((...values: typeof args) => void) | undefined)?.apply(part, args);
    }
  }

  return {
    add(part) {
      parts.push(part);
    },

    granted(lease: Lease, waitedMs: number) {
      tell('granted', lease, waitedMs);
      metrics.granted(lease.mode);
      if (debug) {
        logger.debug('lock granted', {
          name: lease.name,
          owner: lease.owner,
          token: formatToken(lease.token),
          ttlMs: lease.ttlMs,
        });
      }
    },

    extended(lease: Lease) {
      tell('extended', lease);
    },

    released(name: string, token: bigint) {
      tell('released', name, token);
      if (debug) logger.debug('lock released', { name, token: formatToken(token) });
    },

    lost(event: LostEvent) {
      metrics.lost(event.reason);
      tell('lost', event);
      logger.info('lock lost', {
        name: event.name,
        token: formatToken(event.token),
        reason: event.reason,
      });
    },

    releaseRequested(request: ReleaseRequestResult & { reason?: string | undefined }) {
      if (request.notified > 0) metrics.releaseRequest('asked');
      tell('releaseRequested', request);
      if (debug) logger.debug('release requested', { ...request });
    },

    releaseRequestHeard(event: ReleaseRequestedEvent) {
      metrics.releaseRequest('delivered');
      tell('releaseRequestHeard', event);
    },

    waiting(name: string, count: number) {
      if (count > 0) waiting.set(name, count);
      else waiting.delete(name);
      tell('waiting', name, count);
    },

    backendCall(operation: string, durationMs: number, error?: unknown) {
      if (!TIMED.has(operation)) return;
      metrics.backend(operation as BackendOperation, durationMs / 1000, error !== undefined);
      // Adapters do not report their connections: a call failing with UNAVAILABLE is as good a
      // sign of an outage as a failed probe, and a call that succeeds that it is over.
      if (error === undefined) health.observe();
      else if (isDlmError(error, 'UNAVAILABLE')) health.observe(error);
      else {
        logger.error('backend call failed', {
          backend: options.backendKind,
          operation,
          error: error instanceof Error ? error.message : String(error),
        });
      }
    },

    totalWaiters() {
      let total = 0;
      for (const count of waiting.values()) total += count;
      return total;
    },
  };
}

/**
 * A backend call the server makes itself (listing locks for the admin API and the feed), timed
 * and reported to `observer` as core reports its own calls.
 */
export async function observedCall<T>(
  observer: Pick<LockObserver, 'backendCall'>,
  operation: BackendOperation,
  call: () => Promise<T>,
): Promise<T> {
  const startedAt = performance.now();
  try {
    const result = await call();
    observer.backendCall?.(operation, performance.now() - startedAt);
    return result;
  } catch (error) {
    observer.backendCall?.(operation, performance.now() - startedAt, error);
    throw error;
  }
}

/** Lists the held locks under a prefix: the backend's `list`, bounded and observed. */
export type ListLocks = (prefix: string) => Promise<LockState[]>;

/**
 * The backend's `list`, bounded by `timeoutMs` and reported to `observer`; undefined when the
 * backend cannot list its locks.
 */
export function listLocksOf(
  backend: LockBackend,
  clock: Clock,
  timeoutMs: number,
  observer: Pick<LockObserver, 'backendCall'>,
): ListLocks | undefined {
  const list = backend.list?.bind(backend);
  if (!list) return undefined;
  return (prefix) =>
    withDeadline(clock, timeoutMs, 'list', () =>
      observedCall(observer, 'list', () => list(prefix)),
    );
}
