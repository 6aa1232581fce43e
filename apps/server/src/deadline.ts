import { boundedCall, type Clock } from '@dlm/core';

/**
 * Rejects with UNAVAILABLE when `call` has not settled within `timeoutMs`: the backstop for the
 * backend calls the server makes itself (admin listing, the lock feed's checks). Core's
 * `boundedCall` under the server's argument order, kept so that its callers need not change.
 */
export const withDeadline = <T>(
  clock: Clock,
  timeoutMs: number,
  what: string,
  call: () => Promise<T>,
): Promise<T> => boundedCall(what, timeoutMs, call, { clock });
