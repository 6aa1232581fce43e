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
  /** The responses being answered, which shutdown lets finish. */
  answering: Answering;
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
  // The client may have gone while its body was read, before this listener: 'close' is past.
  if (gone(response)) controller.abort();
  else {
    response.once('close', () => {
      if (!response.writableFinished) controller.abort();
    });
  }
  return controller.signal;
}

/** Whether the client of `response` is gone (its connection closed) before it was answered. */
function gone(response: ServerResponse): boolean {
  return response.destroyed || response.socket?.destroyed !== false;
}

/** What an acquire or acquireAll answered: one grant, or a set of them. */
type Granted = { name: string; token: string; leaseKey: string } | { grants: Granted[] };

function grantsOf(result: Granted): Array<{ name: string; token: string; leaseKey: string }> {
  return 'grants' in result ? result.grants.flatMap(grantsOf) : [result];
}

/**
 * Sends a grant (`send`) to a caller that may be gone. One gone before the answer was written,
 * or whose connection closed before the answer was out, never learns its token or key: its
 * leases are given back (released with their key) at once rather than left held by nobody
 * until they expire.
 */
export function deliverGrant(
  response: ServerResponse,
  result: unknown,
  send: () => void,
  release: (lease: { name: string; token: string; leaseKey: string }) => Promise<unknown>,
): void {
  const giveBack = () => {
    for (const lease of grantsOf(result as Granted)) release(lease).catch(() => {});
  };
  if (gone(response)) {
    giveBack();
    return;
  }
  send();
  response.once('close', () => {
    if (!response.writableFinished) giveBack();
  });
}

/**
 * The responses of the HTTP doors still being answered: at shutdown the server lets them finish
 * (the waits answered CANCELLED reach their callers) before it closes the connections.
 */
export interface Answering {
  /** Counts `response` until it is sent or its client is gone. */
  track(response: ServerResponse): void;
  /** Resolves once every tracked response is done, or after `boundMs`. */
  settled(boundMs: number): Promise<void>;
}

export function createAnswering(): Answering {
  const open = new Set<ServerResponse>();
  let idle: (() => void) | undefined;
  return {
    track(response) {
      open.add(response);
      response.once('close', () => {
        open.delete(response);
        if (open.size === 0) idle?.();
      });
    },
    settled(boundMs) {
      if (open.size === 0) return Promise.resolve();
      return new Promise((resolve) => {
        const timer = setTimeout(resolve, boundMs);
        idle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    },
  };
}
