import { performance } from 'node:perf_hooks';
import { type AcquireRequest, type HolderProof, isDlmError, type LockBackend } from '@dlm/core';
import type { Logger } from './logger.js';
import type { BackendOperation, ServerMetrics } from './metrics.js';

/**
 * Wraps a backend so that every primitive is timed and counted, and so that the log says when
 * the backend stops answering and when it answers again. Adapters do not report their
 * connections, so "disconnected" is what the server observes: a call failing with UNAVAILABLE;
 * "connected again" is the next call that succeeds. One line per transition, not per call.
 */
export function instrumentBackend(
  backend: LockBackend,
  metrics: ServerMetrics,
  logger: Logger,
): LockBackend {
  let available = true;

  function timed<A, R>(operation: BackendOperation, call: (arg: A) => Promise<R>) {
    return async (arg: A): Promise<R> => {
      const startedAt = performance.now();
      try {
        const result = await call(arg);
        metrics.backend(operation, (performance.now() - startedAt) / 1000, false);
        if (!available) {
          available = true;
          logger.info('backend connected again', { backend: backend.kind, operation });
        }
        return result;
      } catch (error) {
        metrics.backend(operation, (performance.now() - startedAt) / 1000, true);
        if (isDlmError(error, 'UNAVAILABLE')) {
          if (available) {
            available = false;
            logger.warn('backend unavailable', {
              backend: backend.kind,
              operation,
              error: error.message,
            });
          }
        } else {
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
    close: () => backend.close(),
  };
}
