import type { Grant, LockBackend } from './backend.js';
import type { Clock } from './clock.js';
import { createDeadlineQueue } from './deadline-queue.js';
import type { AroundBackendCall, BackendOperation, Notify } from './observer.js';
import { boundedCall } from './time.js';

/** How the lock service calls its backend: timed for the observer, and never without a bound. */
export interface BackendCalls {
  /**
   * One call, reported to the observer when it settles (however long it takes), and run through
   * its request's `around` when it has one.
   */
  call<T>(
    operation: BackendOperation,
    call: () => Promise<T>,
    around?: AroundBackendCall,
  ): Promise<T>;
  /**
   * One call raced against the backstop timeout: UNAVAILABLE (indeterminate) when the backend
   * has not answered in `timeoutMs`; a result that comes later goes to `onLateResult`.
   */
  bounded<T>(
    what: string,
    operation: BackendOperation,
    call: () => Promise<T>,
    onLateResult?: (value: T) => void,
    timeoutMs?: number,
    around?: AroundBackendCall,
  ): Promise<T>;
  /** Gives back a grant nobody will use, without waiting for the answer. */
  releaseQuietly(grant: Grant, keyHash: string): void;
}

export function createBackendCalls(
  backend: LockBackend,
  clock: Clock,
  backendTimeoutMs: number,
  notify: Notify,
): BackendCalls {
  // The backstop of calls with the default timeout: their deadlines come in the order the calls
  // start, so one queue and one timer serve them all (a timer per call was a measurable share of
  // the server's CPU).
  const backstops = createDeadlineQueue(clock, backendTimeoutMs);

  function call<T>(
    operation: BackendOperation,
    run: () => Promise<T>,
    around?: AroundBackendCall,
  ): Promise<T> {
    const startedAt = clock.now();
    return (around ? around(operation, run) : run()).then(
      (value) => {
        notify('backendCall', operation, clock.now() - startedAt);
        return value;
      },
      (error: unknown) => {
        notify('backendCall', operation, clock.now() - startedAt, error);
        throw error;
      },
    );
  }

  /** Races a backend call against the backstop timeout (core's one bounded call). */
  function bounded<T>(
    what: string,
    operation: BackendOperation,
    run: () => Promise<T>,
    onLateResult?: (value: T) => void,
    timeoutMs = backendTimeoutMs,
    around?: AroundBackendCall,
  ): Promise<T> {
    return boundedCall(what, timeoutMs, () => call(operation, run, around), {
      deadlines: backstops,
      indeterminate: true,
      ...(onLateResult ? { onLateResult } : {}),
    });
  }

  function releaseQuietly(grant: Grant, keyHash: string): void {
    call('release', () => backend.release({ name: grant.name, token: grant.token, keyHash })).catch(
      () => {},
    );
  }

  return { call, bounded, releaseQuietly };
}
