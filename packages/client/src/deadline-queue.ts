import type { Clock, Timer } from '@dlm/core';

/**
 * Deadlines that all lie the same `delayMs` after they are added, so they fall due in the order
 * they were added: one timer, armed for the oldest pending one, serves them all, where a timer
 * per request was a measurable share of the client's CPU. Entries removed before they are due
 * leave the front at once, and with nothing pending no timer is left behind.
 */
export interface DeadlineQueue {
  /** Calls `expire` `delayMs` from now unless the returned function is called first. */
  add(expire: () => void): () => void;
}

interface Entry {
  deadline: number;
  done: boolean;
  expire: () => void;
}

const shared = new WeakMap<Clock, Map<number, DeadlineQueue>>();

/** The queue for `delayMs` on `clock`, shared by every connection of the process that uses it. */
export function deadlineQueue(clock: Clock, delayMs: number): DeadlineQueue {
  let byDelay = shared.get(clock);
  if (!byDelay) {
    byDelay = new Map();
    shared.set(clock, byDelay);
  }
  let queue = byDelay.get(delayMs);
  if (!queue) {
    queue = createDeadlineQueue(clock, delayMs);
    byDelay.set(delayMs, queue);
  }
  return queue;
}

export function createDeadlineQueue(clock: Clock, delayMs: number): DeadlineQueue {
  const entries: Entry[] = [];
  let head = 0;
  let timer: Timer | undefined;
  let timerAt = Number.POSITIVE_INFINITY;

  function dropFinished(): void {
    while (head < entries.length && entries[head]!.done) head++;
    if (head === entries.length) {
      entries.length = 0;
      head = 0;
      timer?.cancel();
      timer = undefined;
      timerAt = Number.POSITIVE_INFINITY;
    } else if (head > 1024 && head * 2 > entries.length) {
      entries.splice(0, head);
      head = 0;
    }
  }

  function arm(): void {
    const first = entries[head];
    if (!first) return;
    if (timer && timerAt <= first.deadline) return;
    timer?.cancel();
    timerAt = first.deadline;
    timer = clock.setTimer(onTimer, Math.max(0, first.deadline - clock.now()));
  }

  function onTimer(): void {
    timer = undefined;
    timerAt = Number.POSITIVE_INFINITY;
    const now = clock.now();
    for (;;) {
      dropFinished();
      const first = entries[head];
      if (!first || first.deadline > now) break;
      first.done = true;
      try {
        first.expire();
      } catch {
        // One request's failure must not stop the others' deadlines.
      }
    }
    arm();
  }

  return {
    add(expire) {
      const entry: Entry = { deadline: clock.now() + delayMs, done: false, expire };
      entries.push(entry);
      arm();
      return () => {
        if (entry.done) return;
        entry.done = true;
        if (entries[head] === entry) dropFinished();
      };
    },
  };
}
