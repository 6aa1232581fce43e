import { formatToken, type ReleaseRequestedEvent } from '@dlm/core';
import type { Handlers, LockScope } from './session-scope.js';

export type RequestReleaseMethod = 'lock.requestRelease';

/** Checks that the principal may `lock` the name in `params` (`lock-handlers.ts`). */
type PermittedName = (scope: LockScope, params: Record<string, unknown>, action: 'lock') => string;

/**
 * `lock.requestRelease`: anyone who may lock a name may ask its holders to let go (an operator's
 * revoke is the forced form). Core sends the request over the backend's event channel, so the
 * holders hear it on whichever server follows their lease.
 */
export function releaseRequestHandlers(
  scope: LockScope,
  permittedName: PermittedName,
): Handlers<RequestReleaseMethod> {
  return {
    'lock.requestRelease': async (params) => {
      const name = permittedName(scope, params, 'lock');
      const reason = params.reason as string | undefined;
      return scope.context.service.requestRelease({ name, reason });
    },
  };
}

/** Tells the session holding the lease `lock.releaseRequested`. */
export function tellReleaseRequested(scope: LockScope, event: ReleaseRequestedEvent): void {
  if (!scope.open) return;
  scope.notify('lock.releaseRequested', {
    name: event.name,
    token: formatToken(event.token),
    ...(event.reason === undefined ? {} : { reason: event.reason }),
  });
}
