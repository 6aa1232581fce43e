import { Etcd3, type IOptions } from 'etcd3';

type FaultHandling = NonNullable<IOptions['faultHandling']>;
type Policy = NonNullable<FaultHandling['global']>;
type Backoff = NonNullable<FaultHandling['watchBackoff']>;

/**
 * Calls straight through: no retries, no circuit breaker. The adapter bounds and retries each
 * call itself (etcd-calls.ts), so that a down cluster gives UNAVAILABLE within
 * `commandTimeoutMs` and a cluster that comes back is used at once.
 */
const neverAborted = new AbortController().signal;
const passThrough: Policy = {
  _altReturn: undefined as never,
  onSuccess: () => ({ dispose() {} }),
  onFailure: () => ({ dispose() {} }),
  // One signal for every call: nothing aborts it, and a new AbortController per call showed up
  // in profiles.
  execute: async (fn) => fn({ signal: neverAborted }),
};

/**
 * How long the watch stream waits before reconnecting: 100 ms doubling to 1 s (etcd3's default
 * grows to 30 s, which would leave waiters unwoken for that long after an outage).
 */
function watchBackoff(durationMs = 100): Backoff {
  return { duration: durationMs, next: () => watchBackoff(Math.min(durationMs * 2, 1_000)) };
}

export function createEtcdClient(endpoints: string[]): Etcd3 {
  return new Etcd3({
    hosts: endpoints,
    faultHandling: {
      global: passThrough,
      host: () => passThrough,
      watchBackoff: watchBackoff(),
    },
    grpcOptions: {
      // Notice a member that stopped answering (paused, blackholed) on long-lived streams.
      // etcd refuses pings more often than every 5 s by default.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 3_000,
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1_000,
    },
  });
}
