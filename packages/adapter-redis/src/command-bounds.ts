import {
  boundedCall,
  type Clock,
  type DeadlineQueue,
  settlesWithin,
  toUnavailable,
} from '@dlm/core';

/**
 * Bounds every call to Redis in time and turns whatever went wrong into UNAVAILABLE, marked
 * `indeterminate` when a write may have run without our hearing of it.
 */

/** ioredis refused to send at all (not connected, offline queue off): nothing ran. */
const NOT_SENT = "Stream isn't writeable";

function nothingRan(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  // A server error reply (READONLY, OOM, NOPERM, a script error before any write) means the
  // script was refused or aborted without writing: our scripts write only after all checks.
  return error.name === 'ReplyError' || error.message.startsWith(NOT_SENT);
}

/**
 * ioredis's words for "not connected" name its own internals; users read this in the CLI and in
 * /readyz. The original stays the cause.
 */
function inUserTerms(error: unknown): unknown {
  if (!(error instanceof Error) || !error.message.startsWith(NOT_SENT)) return error;
  return new Error('not connected to Redis (the connection is down; reconnecting)', {
    cause: error,
  });
}

export interface CallBounds {
  clock: Clock;
  timeoutMs: number;
  /**
   * Shares one timer among the calls in flight (core's deadline queue): a timer per command was
   * a measurable share of the adapter's CPU. Without it each call has its own.
   */
  deadlines?: DeadlineQueue;
}

/**
 * Runs `call` and rejects with UNAVAILABLE if it has not settled within `timeoutMs` (core's
 * `boundedCall` in Redis's words). The timed-out command is not cancelled (it cannot be: it may
 * already be on the wire); callers make its late execution harmless with the server-side
 * deadline.
 */
export function bounded<T>(
  bounds: CallBounds,
  what: string,
  write: boolean,
  call: (abandoned: () => boolean) => Promise<T>,
): Promise<T> {
  return boundedCall(what, bounds.timeoutMs, call, {
    clock: bounds.clock,
    ...(bounds.deadlines ? { deadlines: bounds.deadlines } : {}),
    timeoutReason: `Redis did not answer within ${bounds.timeoutMs} ms`,
    indeterminate: write,
    mapError: (error) =>
      toUnavailable(inUserTerms(error), what, write && !nothingRan(error), 'Redis'),
  });
}

/** Waits for `promise` up to `ms`: true when it fulfilled in time, false on time-out or failure. */
export const within = settlesWithin;
