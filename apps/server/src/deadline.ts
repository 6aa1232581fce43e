import { type Clock, DlmError } from '@dlm/core';

/**
 * Rejects with UNAVAILABLE when `call` has not settled within `timeoutMs`: the backstop for the
 * backend calls the server makes itself (admin listing, the lock feed's checks), as core's
 * lock service has for the calls it makes. Adapters bound their own calls; this makes sure
 * that nothing hangs whatever an adapter does.
 */
export function withDeadline<T>(
  clock: Clock,
  timeoutMs: number,
  what: string,
  call: () => Promise<T>,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = clock.setTimer(
      () =>
        reject(
          new DlmError('UNAVAILABLE', `${what}: the backend did not answer in ${timeoutMs} ms`),
        ),
      timeoutMs,
    );
    call().then(
      (value) => {
        timer.cancel();
        resolve(value);
      },
      (error: unknown) => {
        timer.cancel();
        reject(error);
      },
    );
  });
}
