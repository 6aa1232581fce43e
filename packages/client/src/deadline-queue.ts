import { type Clock, createDeadlineQueue, type DeadlineQueue } from '@dlm/core';

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

export type { DeadlineQueue };
