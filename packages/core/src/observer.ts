import type { Lease, LostEvent } from './lock-service.js';
import type { ReleaseRequestedEvent, ReleaseRequestResult } from './release-requests.js';

/**
 * What a lock service reports about its own activity, for metrics, logs and feeds. Every
 * callback is optional; each event is reported from one place in the service, after the fact,
 * and an observer that throws is ignored (it must not change what the service does).
 */
export interface LockObserver {
  /** A lease was granted by this service (`waitedMs`: how long the acquire queued). */
  granted?(lease: Lease, waitedMs: number): void;
  /** A lease granted by this service was extended. */
  extended?(lease: Lease): void;
  /** A lease granted by this service was released by its holder. */
  released?(name: string, token: bigint): void;
  /** A lease granted by this service was lost (expired, revoked, …): the LostEvent. */
  lost?(event: LostEvent): void;
  /**
   * Someone asked, through this service, the holders of `name` to let go (`requestRelease`, or
   * an acquire with `requestRelease` that had to wait); `notified` holders were asked.
   */
  releaseRequested?(request: ReleaseRequestResult & { reason?: string | undefined }): void;
  /** A lease followed by this service heard a release request (whoever asked, wherever). */
  releaseRequestHeard?(event: ReleaseRequestedEvent): void;
  /** The number of acquires queued in this service for `name` changed to `count`. */
  waiting?(name: string, count: number): void;
  /** One backend call finished: operation name (tryAcquire, release, extend, inspect,
   *  revoke, list, and acquireQueued: a whole wait in the backend's queue), its duration in
   *  ms, and the error if it failed. */
  backendCall?(operation: string, durationMs: number, error?: unknown): void;
}

/** The backend operations `LockObserver.backendCall` names. */
export type BackendOperation =
  | 'tryAcquire'
  | 'release'
  | 'extend'
  | 'inspect'
  | 'revoke'
  | 'list'
  | 'requestRelease'
  | 'acquireQueued';

/**
 * Runs one backend call made for one request (`AcquireOptions.aroundBackendCall`): a tracer opens
 * a span around it (the server's OpenTelemetry spans), so core needs no tracing library. It must
 * call `call` once and settle as the promise it returns does.
 */
export type AroundBackendCall = <T>(
  operation: BackendOperation,
  call: () => Promise<T>,
) => Promise<T>;

type Arguments<K extends keyof LockObserver> = Parameters<NonNullable<LockObserver[K]>>;

/** Tells `observer` of one event; the one place where an observer's failure is swallowed. */
export type Notify = <K extends keyof LockObserver>(event: K, ...args: Arguments<K>) => void;

/** The service's one way to reach its observer (a no-op without one). */
export function observerNotifier(observer: LockObserver | undefined): Notify {
  if (!observer) return () => {};
  return (event, ...args) => {
    const callback = observer[event] as ((...values: typeof args) => void) | undefined;
    if (!callback) return;
    try {
      callback.apply(observer, args);
    } catch {
      // An observer is told after the fact; its failure must not break the service.
    }
  };
}
