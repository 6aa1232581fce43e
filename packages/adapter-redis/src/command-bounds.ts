import { type Clock, DlmError, type Timer, toUnavailable } from '@dlm/core';

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

export interface CallBounds {
  clock: Clock;
  timeoutMs: number;
  /** Shares one timer among calls (see `createDeadlines`); without it each call has its own. */
  deadlines?: Deadlines;
}

/** Time-outs of many concurrent calls served by one timer. */
export interface Deadlines {
  /** Calls `expire` after `delayMs` unless the returned timer is cancelled first. */
  add(delayMs: number, expire: () => void): Timer;
}

interface Deadline {
  at: number;
  expire: (() => void) | undefined;
}

/**
 * One timer for the time-outs of every call in flight on a connection: a timer per command was
 * a measurable share of the adapter's CPU. Calls mostly end in the order they start, so the
 * queue is kept sorted by appending (an out-of-order deadline is inserted in place), and the one
 * timer is armed for the earliest pending deadline. A cancelled call leaves the queue when it
 * reaches the front; when nothing is pending the timer is cancelled, so none is left behind.
 */
export function createDeadlines(clock: Clock): Deadlines {
  const queue: Deadline[] = [];
  let head = 0;
  let timer: Timer | undefined;
  let timerAt = Number.POSITIVE_INFINITY;

  function dropSettled(): void {
    while (head < queue.length && queue[head]!.expire === undefined) head++;
    if (head === queue.length) {
      queue.length = 0;
      head = 0;
    } else if (head > 1024 && head * 2 > queue.length) {
      queue.splice(0, head);
      head = 0;
    }
  }

  function arm(): void {
    const first = queue[head];
    if (!first) {
      timer?.cancel();
      timer = undefined;
      timerAt = Number.POSITIVE_INFINITY;
      return;
    }
    // A timer due no later than the front serves it: when it fires, it re-arms.
    if (timer && timerAt <= first.at) return;
    timer?.cancel();
    timerAt = first.at;
    timer = clock.setTimer(fire, Math.max(0, first.at - clock.now()));
  }

  function fire(): void {
    timer = undefined;
    timerAt = Number.POSITIVE_INFINITY;
    const now = clock.now();
    for (;;) {
      dropSettled();
      const first = queue[head];
      if (!first || first.at > now) break;
      const expire = first.expire;
      first.expire = undefined;
      expire?.();
    }
    arm();
  }

  function insert(entry: Deadline): void {
    const last = queue[queue.length - 1];
    if (queue.length === head || (last && last.at <= entry.at)) {
      queue.push(entry);
      return;
    }
    let low = head;
    let high = queue.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (queue[middle]!.at <= entry.at) low = middle + 1;
      else high = middle;
    }
    queue.splice(low, 0, entry);
  }

  return {
    add(delayMs, expire) {
      const entry: Deadline = { at: clock.now() + Math.max(0, delayMs), expire };
      insert(entry);
      arm();
      return {
        cancel() {
          if (entry.expire === undefined) return;
          entry.expire = undefined;
          if (queue[head] === entry) {
            dropSettled();
            arm();
          }
        },
      };
    },
  };
}

/**
 * Runs `call` and rejects with UNAVAILABLE if it has not settled within `timeoutMs`. The
 * timed-out command is not cancelled (it cannot be: it may already be on the wire); callers
 * make its late execution harmless with the server-side deadline.
 */
export function bounded<T>(
  bounds: CallBounds,
  what: string,
  write: boolean,
  call: (abandoned: () => boolean) => Promise<T>,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onTimeout = () => {
      if (settled) return;
      settled = true;
      reject(
        new DlmError('UNAVAILABLE', `${what}: Redis did not answer within ${bounds.timeoutMs} ms`, {
          ...(write ? { indeterminate: true } : {}),
        }),
      );
    };
    const timer = bounds.deadlines
      ? bounds.deadlines.add(bounds.timeoutMs, onTimeout)
      : bounds.clock.setTimer(onTimeout, bounds.timeoutMs);
    let pending: Promise<T>;
    try {
      pending = call(() => settled);
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => {
        timer.cancel();
        if (settled) return;
        settled = true;
        resolve(value);
      },
      (error: unknown) => {
        timer.cancel();
        if (settled) return;
        settled = true;
        reject(toUnavailable(error, what, write && !nothingRan(error)));
      },
    );
  });
}

/** Waits for `promise` up to `ms`: true when it fulfilled in time, false on time-out or failure. */
export function within(clock: Clock, promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = clock.setTimer(() => resolve(false), ms);
    promise.then(
      () => {
        timer.cancel();
        resolve(true);
      },
      () => {
        timer.cancel();
        resolve(false);
      },
    );
  });
}
