import { performance } from 'node:perf_hooks';
import type { ServerMetrics, WaitOutcome } from './metrics.js';
import type { RpcRequest } from './rpc.js';

/** How a waiting acquire ended, by the code it was answered with. */
function waitOutcome(code: string): WaitOutcome {
  if (code === 'OK') return 'granted';
  if (code === 'LOCK_HELD') return 'timeout';
  if (code === 'CANCELLED') return 'cancelled';
  return 'error';
}

/**
 * Counts and times one answered request: what only the protocol layer sees (the method, the
 * code the client got, how long it waited for its answer, and an error's `data`: a refusal by a
 * lock-delay). Lock activity itself is observed in
 * core, through the server's lock observer.
 */
export function recordRequest(
  metrics: ServerMetrics,
  request: RpcRequest,
  code: string,
  startedAt: number,
  data?: { lockDelayRemainingMs?: unknown },
): void {
  metrics.request(request.method, code);
  if (data?.lockDelayRemainingMs !== undefined) metrics.lockDelayed();
  const { method } = request;
  if (method === 'lock.acquire') {
    const seconds = (performance.now() - startedAt) / 1000;
    const waitMs = request.params.waitMs;
    if (typeof waitMs === 'number' && waitMs > 0) metrics.wait(waitOutcome(code), seconds);
    else metrics.latency(method, seconds);
  } else if (method === 'lock.release' || method === 'lock.extend') {
    metrics.latency(method, (performance.now() - startedAt) / 1000);
  }
}
