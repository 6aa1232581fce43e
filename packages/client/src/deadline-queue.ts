import { type Clock, createDeadlineQueue, type DeadlineQueue, getOrCreate } from '@dlm/core';

const shared = new WeakMap<Clock, Map<number, DeadlineQueue>>();

/** The queue for `delayMs` on `clock`, shared by every connection of the process that uses it. */
export function deadlineQueue(clock: Clock, delayMs: number): DeadlineQueue {
  const byDelay = getOrCreate(shared, clock, () => new Map<number, DeadlineQueue>());
  return getOrCreate(byDelay, delayMs, () => createDeadlineQueue(clock, delayMs));
}

export type { DeadlineQueue };
