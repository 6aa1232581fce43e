import type { LockConflict } from './backend.js';
import { DlmError, isDlmError } from './errors.js';
import type { LockMode } from './validation.js';

/** The answer to an acquire that found the lock held (a try-lock, or a wait at its deadline). */
export function lockHeld(
  name: string,
  ttlRemainingMs: number | undefined,
  lockDelayRemainingMs?: number,
): DlmError {
  const ms = (value: number) => Math.max(0, Math.ceil(value));
  if (lockDelayRemainingMs !== undefined && lockDelayRemainingMs > 0) {
    // Free, but its last lease ended uncleanly: nobody is granted it until the delay passes.
    return new DlmError(
      'LOCK_HELD',
      `lock ${JSON.stringify(name)} is in its lock-delay for ${ms(lockDelayRemainingMs)} ms more`,
      { ttlRemainingMs: ms(lockDelayRemainingMs), lockDelayRemainingMs: ms(lockDelayRemainingMs) },
    );
  }
  return new DlmError(
    'LOCK_HELD',
    `lock ${JSON.stringify(name)} is held by another owner`,
    ttlRemainingMs === undefined ? {} : { ttlRemainingMs: ms(ttlRemainingMs) },
  );
}

/**
 * The one NOT_HOLDER error: the same message whether the token no longer holds or the key is
 * wrong or missing, so a caller learns nothing about someone else's lease.
 */
export function notHolderError(name: string, token: bigint): DlmError {
  return new DlmError(
    'NOT_HOLDER',
    `token ${token} does not hold lock ${JSON.stringify(name)} (released, expired or taken over)`,
  );
}

/** A grant or extend whose reply came after the lease it reports had run out (S5). */
export function ranOutError(): DlmError {
  return new DlmError('UNAVAILABLE', 'the backend answered after the lease had already run out', {
    indeterminate: true,
  });
}

export function cancelledError(message = 'the wait was cancelled'): DlmError {
  return new DlmError('CANCELLED', message);
}

export function tooManyWaiters(name: string): DlmError {
  return new DlmError('LIMIT_EXCEEDED', `too many waiters for lock ${JSON.stringify(name)}`);
}

/** What a waiter is told when its attempt failed with something that is not a DlmError. */
export function asDlmError(error: unknown): DlmError {
  if (isDlmError(error)) return error;
  return new DlmError('INTERNAL', error instanceof Error ? error.message : String(error), {
    cause: error,
  });
}

/**
 * A request the holders refuse as asked (`AcquireResult.conflict`), in the user's terms:
 * INVALID_PARAMS with the field to change, and for a limit the holders' own (`details.limit`).
 */
export function conflictError(
  request: { name: string; owner: string; mode: LockMode; limit: number },
  conflict: LockConflict,
): DlmError {
  const name = JSON.stringify(request.name);
  if (conflict.field === 'limit') {
    return new DlmError(
      'INVALID_PARAMS',
      `limit ${request.limit} differs from the holders' limit ${conflict.limit} of lock ${name}`,
      { field: 'limit', limit: conflict.limit },
    );
  }
  const held = request.mode === 'shared' ? 'exclusive' : 'shared';
  return new DlmError(
    'INVALID_PARAMS',
    `owner ${JSON.stringify(request.owner)} holds ${name} in mode ${held}: release it before acquiring it ${request.mode}`,
    { field: 'mode' },
  );
}
