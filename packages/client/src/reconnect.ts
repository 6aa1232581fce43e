import { type Backoff, type Clock, createBackoff, type RetryPolicy, type Timer } from '@dlm/core';

/**
 * When to try connecting again after a drop: every attempt of an outage waits a full-jitter
 * delay under core's retry policy, and the outage's backoff starts afresh after a session.
 */
export class ReconnectSchedule {
  /** The current outage's backoff; a new one after every session. */
  private backoff: Backoff | undefined;
  private timer: Timer | undefined;

  constructor(
    private readonly policy: RetryPolicy | false,
    private readonly clock: Clock,
  ) {}

  get enabled(): boolean {
    return this.policy !== false;
  }

  /** Books the next connection attempt of this outage; false when the policy says stop. */
  schedule(attempt: () => void): boolean {
    if (this.policy === false) return false;
    // Every attempt of an outage is delayed, the first included: clients dropped together by a
    // server restart must not all come back in the same instant.
    this.backoff ??= createBackoff(this.policy, {
      clock: this.clock,
      retries: this.policy.attempts,
    });
    const delayMs = this.backoff.next();
    if (delayMs === undefined) return false;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      attempt();
    }, delayMs);
    return true;
  }

  /** Connection attempts booked in this outage. */
  get retries(): number {
    return this.backoff?.retries ?? 0;
  }

  cancel(): void {
    this.timer?.cancel();
  }

  /** The outage is over (a session) or abandoned: the next one starts a fresh backoff. */
  reset(): void {
    this.backoff = undefined;
  }
}
