import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { LockService } from '@dlm/core';
import type { AddressLimits } from './address-limits.js';
import type { HttpGate } from './http-caller.js';
import type { ServerMetrics } from './metrics.js';
import type { Principal } from './permissions.js';
import type { HeldLeases, LockScope, SessionLimits } from './session-scope.js';

/** What the HTTP doors share with the WebSocket: the service, its limits, metrics and gate. */
export interface DoorContext extends HttpGate {
  service: LockService;
  limits: SessionLimits;
  serverVersion: string;
  metrics: ServerMetrics;
  /** Requests in flight and the request rate, per client address, for every HTTP door. */
  addresses: AddressLimits;
}

/**
 * A request of an HTTP door keeps no leases: the grant goes back to its caller with the lease
 * key, and release and extend must present that key (without one they are NOT_HOLDER).
 */
const NO_LEASES: HeldLeases = {
  get: () => undefined,
  keyFor: () => null,
  holdsWith: () => false,
  hold: () => {},
  count: () => 0,
  upperBound: 0,
};

/** The caller of one HTTP request, for the lock handlers: no session, nobody to notify. */
export function requestScope(context: DoorContext, principal: Principal): LockScope {
  return {
    // The default owner: each request its own, as each WebSocket session is.
    id: randomUUID(),
    context,
    principal,
    open: true,
    leases: NO_LEASES,
    acquiring: 0,
    notify: () => {},
  };
}

/**
 * An AbortSignal that aborts when the client goes away before its answer was sent, for the
 * requests that wait (a wait must end with its caller: nothing is granted to nobody).
 */
export function abandonSignal(response: ServerResponse): AbortSignal {
  const controller = new AbortController();
  response.once('close', () => {
    if (!response.writableFinished) controller.abort();
  });
  return controller.signal;
}
