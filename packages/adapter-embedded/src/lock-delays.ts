import type { RecoveredDelay } from './journal.js';
import type { JournalRecord } from './journal-format.js';

/** One name's lock-delay: kept by the exclusive lease `token`, nobody is granted before `until`. */
interface Delay {
  token: bigint;
  delayMs: number;
  /** Monotonic ms: while the lease lives, its deadline plus the delay (an expiry needs no write). */
  until: number;
}

/**
 * The lock-delays of one embedded backend (see `AcquireRequest.lockDelayMs`). A lease with a
 * delay keeps `until` at its deadline plus the delay from its grant on, so its expiry starts
 * the delay without a step of its own; its release drops it, its revocation restarts it from
 * then. Every change is returned as the journal record that makes it durable.
 */
export class LockDelays {
  private readonly byName = new Map<string, Delay>();

  /** A grant or refresh of exclusive lease `token` with this delay (0: none) and deadline. */
  granted(name: string, token: bigint, delayMs: number, deadline: number, now: number) {
    if (delayMs <= 0) {
      return this.byName.delete(name) ? this.record(name, { token, delayMs }, 0) : undefined;
    }
    const delay = { token, delayMs, until: deadline + delayMs };
    this.byName.set(name, delay);
    return this.record(name, delay, delay.until - now);
  }

  /** Lease `token` runs on to `deadline`: its delay starts at the new end. */
  extended(name: string, token: bigint, deadline: number, now: number) {
    const delay = this.kept(name, token);
    if (delay === undefined) return undefined;
    delay.until = deadline + delay.delayMs;
    return this.record(name, delay, delay.until - now);
  }

  /** Lease `token` ended: released (no delay) or revoked (the delay from `now`). */
  ended(name: string, token: bigint, how: 'released' | 'revoked', now: number) {
    const delay = this.kept(name, token);
    if (delay === undefined) return undefined;
    if (how === 'released') {
      this.byName.delete(name);
      return this.record(name, delay, 0);
    }
    delay.until = now + delay.delayMs;
    return this.record(name, delay, delay.delayMs);
  }

  /** How long `name`'s delay has left at `now` (0: none); one that has passed is dropped. */
  remainingMs(name: string, now: number): number {
    const delay = this.byName.get(name);
    if (delay === undefined) return 0;
    if (delay.until > now) return Math.ceil(delay.until - now);
    this.byName.delete(name);
    return 0;
  }

  /**
   * Delays as journaled, counted in full from `now` (the monotonic clock restarted, as for
   * leases); only a wall clock showing the whole delay gone drops one.
   */
  recover(recovered: Map<string, RecoveredDelay>, now: number): void {
    const wallNow = Date.now();
    for (const [name, { token, ms, wallMs, delayMs }] of recovered) {
      if (wallNow - wallMs >= ms) continue;
      this.byName.set(name, { token, delayMs, until: now + ms });
    }
    recovered.clear();
  }

  /** Every running delay, for a snapshot of the journal. */
  snapshot(now: number): JournalRecord[] {
    const records: JournalRecord[] = [];
    for (const [name, delay] of this.byName) {
      if (delay.until > now) records.push(this.record(name, delay, delay.until - now));
    }
    return records;
  }

  private kept(name: string, token: bigint): Delay | undefined {
    const delay = this.byName.get(name);
    return delay?.token === token ? delay : undefined;
  }

  private record(
    name: string,
    { token, delayMs }: Pick<Delay, 'token' | 'delayMs'>,
    ms: number,
  ): JournalRecord {
    const wallMs = Date.now();
    return { type: 'delay', name, token, ms: Math.max(0, Math.ceil(ms)), wallMs, delayMs };
  }
}
