import type { Timer } from './clock.js';
import type { BackendQueue, QueueChange, QueueSleep, QueueStep } from './queue-driver.js';

/** One waiter's sleep/wake state: what it sleeps on, and what changed during a look. */
export interface Sleeper {
  /** A change concerning the waiter if `affects` holds for the step it sleeps on (or finds). */
  changed(change: QueueChange, affects: (step: QueueSleep) => boolean): void;
  /** Wakes it, whatever it sleeps on (a new connection, a close). */
  wake(): void;
  /**
   * Runs one look; changes reported meanwhile are checked against its step (`missed`). What was
   * reported before it is forgotten (the look reads the store after it). A step taken without a
   * look is checked against every change reported since the wake.
   */
  looking(look: () => Promise<QueueStep> | QueueStep): Promise<QueueStep>;
  /** Whether a change reported since the last look began (or the wake) concerns `step`. */
  missed(step: QueueSleep): boolean;
  /** The change that woke it from sleeping on the entry ahead: that entry left (once). */
  predecessorLeft(): QueueChange | undefined;
  /** Sleeps until woken, aborted, or `wakeAfterMs` passed. */
  sleep(step: QueueSleep, wakeAfterMs: number | undefined, signal: AbortSignal): Promise<void>;
  /** The wait is over: later changes (a one-shot watch firing late) are ignored. */
  end(): void;
}

export function createSleeper({ clock }: Pick<BackendQueue<never>, 'clock'>): Sleeper {
  let sleepingOn: QueueSleep | undefined;
  let wake: () => void = () => {};
  let left: QueueChange | undefined;
  const seen: ((step: QueueSleep) => boolean)[] = [];
  let ended = false;
  return {
    changed(change, affects) {
      const step = sleepingOn;
      if (ended) return;
      if (step === undefined) seen.push(affects);
      else if (affects(step)) {
        const ahead = change.what === 'entry-left' && step.kind === 'predecessor';
        left = ahead && change.key !== undefined && change.key === step.key ? change : undefined;
        wake();
      }
    },
    wake: () => wake(),
    async looking(look) {
      seen.length = 0;
      return look();
    },
    missed: (step) => seen.some((affects) => affects(step)),
    predecessorLeft() {
      const change = left;
      left = undefined;
      return change;
    },
    end() {
      ended = true;
      seen.length = 0;
    },
    sleep(step, wakeAfterMs, signal) {
      return new Promise<void>((resolve) => {
        let timer: Timer | undefined;
        const done = () => {
          timer?.cancel();
          signal.removeEventListener('abort', done);
          sleepingOn = undefined;
          wake = () => {};
          resolve();
        };
        sleepingOn = step;
        left = undefined;
        // Checked against the step it sleeps on (`missed`): from now on, only what comes after.
        seen.length = 0;
        wake = done;
        if (wakeAfterMs !== undefined) timer = clock.setTimer(done, wakeAfterMs);
        signal.addEventListener('abort', done, { once: true });
      });
    },
  };
}
