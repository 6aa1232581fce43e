import { performance } from 'node:perf_hooks';
import { type AcquireRequest, type HolderProof, isDlmError, type LockBackend } from '@dlm/core';
import type { BackendHealth } from './backend-health.js';
import type { Logger } from './logger.js';
import type { BackendOperation, ServerMetrics } from './metrics.js';

/**
 * Wraps a backend so that every primitive is timed and counted, and so that what each call
 * finds reaches `health` (which logs the transitions and answers `/readyz`): adapters do not
 * report their connections, so a call failing with UNAVAILABLE is as good a sign of an outage
 * as a failed probe, and a call that succeeds as good a sign that it is over.
 */
export function instrumentBackend(
  backend: LockBackend,
  metrics: ServerMetrics,
  logger: Logger,
  health: BackendHealth,
): LockBackend {
  function timed<A, R>(operation: BackendOperation, call: (arg: A) => Promise<R>) {
    return async (arg: A): Promise<R> => {
      const startedAt = performance.now();
      try {
        const result = await call(arg);
        metrics.backend(operation, (performance.now() - startedAt) / 1000, false);
        health.observe();
        return result;
      } catch (error) {
        metrics.backend(operation, (performance.now() - startedAt) / 1000, true);
        if (isDlmError(error, 'UNAVAILABLE')) health.observe(error);
        else {
          logger.error('backend call failed', {
            backend: backend.kind,
            operation,
            error: error instanceof Error ? error.message : String(error),
          });
        }
        throw error;
      }
    };
  }

  const revoke = backend.revoke?.bind(backend);
  const list = backend.list?.bind(backend);
  // Passed through untimed: its duration is mostly the wait, not the backend's latency.
  const acquireQueued = backend.acquireQueued?.bind(backend);
  return {
    kind: backend.kind,
    // A getter: some adapters settle their capabilities once connected (Redis expiry events).
    get capabilities() {
      return backend.capabilities;
    },
    tryAcquire: timed('tryAcquire', (request: AcquireRequest) => backend.tryAcquire(request)),
    release: timed('release', (request: HolderProof) => backend.release(request)),
    extend: timed('extend', (request: HolderProof & { ttlMs: number }) => backend.extend(request)),
    inspect: timed('inspect', (name: string) => backend.inspect(name)),
    watch: (name, listener) => backend.watch(name, listener),
    ...(revoke ? { revoke: timed('revoke', revoke) } : {}),
    ...(list ? { list: timed('list', list) } : {}),
    ...(acquireQueued ? { acquireQueued } : {}),
    ...(backend.ping ? { ping: backend.ping.bind(backend) } : {}),
    close: () => backend.close(),
  };
}
