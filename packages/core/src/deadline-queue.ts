import type { Clock, Timer } from './clock.js';

/**
 * Time-outs of many calls in flight, served by one timer armed for the earliest: a timer per
 * call was a measurable share of CPU (the client's per request, the lock service's per backend
 * call, the Redis adapter's per command). Deadlines mostly come in the order they are added
 * (most share the queue's `delayMs`), so an entry is linked in from the back, which is where it
 * almost always belongs. Entries removed before they are due are unlinked at once, and with
 * nothing pending no timer is left behind.
 */
export interface DeadlineQueue {
  /**
   * Calls `expire` `delayMs` (default: the queue's) from now unless the returned function is
   * called first.
   */
  add(expire: () => void, delayMs?: number): () => void;
}

interface Entry {
  deadline: number;
  expire: (() => void) | undefined;
  prev: Entry | undefined;
  next: Entry | undefined;
}

export function createDeadlineQueue(clock: Clock, delayMs: number): DeadlineQueue {
  // A doubly linked list in deadline order: a finished entry is unlinked at once, so nothing it
  // refers to (the request, its promise) outlives it — an array that kept finished entries until
  // the front moved on kept thousands of them alive into the old generation.
  let first: Entry | undefined;
  let last: Entry | undefined;
  let timer: Timer | undefined;
  let timerAt = Number.POSITIVE_INFINITY;

  function unlink(entry: Entry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else first = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else last = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
    entry.expire = undefined;
  }

  function arm(): void {
    if (!first || (timer && timerAt <= first.deadline)) return;
    timer?.cancel();
    timerAt = first.deadline;
    timer = clock.setTimer(onTimer, Math.max(0, first.deadline - clock.now()));
  }

  function onTimer(): void {
    timer = undefined;
    timerAt = Number.POSITIVE_INFINITY;
    const now = clock.now();
    while (first && first.deadline <= now) {
      const { expire } = first;
      unlink(first);
      try {
        expire?.();
      } catch {
        // One request's failure must not stop the others' deadlines.
      }
    }
    arm();
  }

  return {
    add(expire, entryDelayMs = delayMs) {
      const deadline = clock.now() + Math.max(0, entryDelayMs);
      // After the last entry due no later than this one (equal deadlines keep their order).
      let before = last;
      while (before && before.deadline > deadline) before = before.prev;
      const after = before ? before.next : first;
      const entry: Entry = { deadline, expire, prev: before, next: after };
      if (before) before.next = entry;
      else first = entry;
      if (after) after.prev = entry;
      else last = entry;
      arm();
      return () => {
        if (!entry.expire) return;
        unlink(entry);
        if (!first) {
          // Nothing pending: no timer left behind to keep the process alive.
          timer?.cancel();
          timer = undefined;
          timerAt = Number.POSITIVE_INFINITY;
        }
      };
    },
  };
}
