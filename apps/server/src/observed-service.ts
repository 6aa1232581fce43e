import { formatToken, type LockService, type LostEvent } from '@dlm/core';
import type { LockFeed } from './lock-feed.js';
import type { Logger } from './logger.js';
import type { ServerMetrics } from './metrics.js';

/** A lock service whose every grant, release and lost lease reaches the feed and the metrics. */
export interface ObservedService extends LockService {
  /** Acquires queued on this server, all names together. */
  totalWaiters(): number;
}

/**
 * Wraps core's lock service so that the sessions and the admin API share one place where lock
 * activity is observed: the feed (dashboard, `lock.watchPrefix`), the lost-lock counter and
 * the debug log. Semantics are the service's own; this only watches.
 */
export function observeService(
  service: LockService,
  feed: LockFeed,
  metrics: ServerMetrics,
  logger: Logger,
): ObservedService {
  const debug = logger.isLevelEnabled?.('debug') ?? true;
  // Names with acquires in flight that asked to wait, and how many: the waiters gauge sums
  // the service's queue lengths over these names only.
  const waiting = new Map<string, number>();

  function observeLost(onLost: ((event: LostEvent) => void) | undefined) {
    return (event: LostEvent) => {
      metrics.lost(event.reason);
      feed.ended(event.name, event.token, event.reason);
      logger.info('lock lost', {
        name: event.name,
        token: formatToken(event.token),
        reason: event.reason,
      });
      onLost?.(event);
    };
  }

  function waitEnded(name: string): void {
    const count = (waiting.get(name) ?? 1) - 1;
    if (count > 0) waiting.set(name, count);
    else waiting.delete(name);
    feed.waitersChanged(name);
  }

  return {
    backend: service.backend,
    limits: service.limits,

    async acquire(options) {
      const waits = (options.waitMs ?? 0) > 0 && typeof options.name === 'string';
      const pending = service.acquire({ ...options, onLost: observeLost(options.onLost) });
      if (waits) {
        waiting.set(options.name, (waiting.get(options.name) ?? 0) + 1);
        feed.waitersChanged(options.name);
      }
      try {
        const lease = await pending;
        // A lease whose end overtook this reply (its release, its expiry) is not held here.
        if (service.holds(lease.name, lease.token)) feed.granted(lease);
        if (debug) {
          logger.debug('lock granted', {
            name: lease.name,
            owner: lease.owner,
            token: formatToken(lease.token),
            ttlMs: lease.ttlMs,
          });
        }
        return lease;
      } finally {
        if (waits) waitEnded(options.name);
      }
    },

    async release(request) {
      await service.release(request);
      feed.released(request.name, request.token);
      if (debug) {
        logger.debug('lock released', {
          name: request.name,
          token: formatToken(request.token),
        });
      }
    },

    async extend(options) {
      // Without an onLost the service keeps the lease's current (already observed) one.
      const lease = await service.extend(
        options.onLost ? { ...options, onLost: observeLost(options.onLost) } : options,
      );
      if (service.holds(lease.name, lease.token)) feed.extended(lease);
      return lease;
    },

    get: (name) => service.get(name),

    async revoke(name) {
      const revoked = await service.revoke(name);
      if (revoked) feed.ended(name, revoked.token, 'revoked');
      return revoked;
    },

    watch: (name, listener) => service.watch(name, listener),
    holds: (name, token) => service.holds(name, token),
    waiters: (name) => service.waiters(name),
    checkName: (name) => service.checkName(name),

    totalWaiters() {
      let total = 0;
      for (const name of waiting.keys()) total += service.waiters(name);
      return total;
    },

    close: () => service.close(),
  };
}
