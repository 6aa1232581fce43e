import { askingEach, clockedSignal } from './clocked-signal.js';
import type { Lease, LeaseCallOptions } from './lease.js';

/**
 * The leases of one `acquireAll`, taken all or nothing: `leases` in the order they were asked
 * for, each with its own fencing token. Its `signal` aborts as soon as any of them ends (lost,
 * run out by the clock, or released), so work that needs every lock stops at once.
 *
 * @example
 * await using group = await client.acquireAll(['accounts/a', 'accounts/b'], { ttlMs: 10_000 });
 * const [from, to] = group.leases;
 * await transfer({ from: from.token, to: to.token, signal: group.signal });
 * // both released here
 */
export interface LeaseGroup extends AsyncDisposable {
  /** One lease per lock, in request order. */
  readonly leases: readonly Lease[];
  /** Aborts when any lease of the group ends; read through the group, it asks the clock. */
  readonly signal: AbortSignal;
  /** Aborts when the holder of any lease of the group is asked to let go (see `Lease`). */
  readonly releaseRequested: AbortSignal;
  /**
   * Releases every lease of the group (all of them, even when one fails). Resolves `true` when
   * this call freed every one, `false` when some had already ended. Rejects (with the first
   * failure) only when the server could not be reached for some; those are retried after a
   * reconnect, as `lease.release()` does.
   */
  release(options?: LeaseCallOptions): Promise<boolean>;
  /** `release()`, never rejecting (errors go to the client's `error` event). */
  [Symbol.asyncDispose](): Promise<void>;
}

export function createLeaseGroup(
  leases: readonly Lease[],
  reportError: (error: unknown) => void,
): LeaseGroup {
  return new LeaseGroupState(leases, reportError);
}

class LeaseGroupState implements LeaseGroup {
  private combined: AbortSignal | undefined;
  private asked: AbortSignal | undefined;

  constructor(
    readonly leases: readonly Lease[],
    private readonly reportError: (error: unknown) => void,
  ) {}

  get signal(): AbortSignal {
    // Each lease's own signal asks the clock first: a deadline passed during a stall aborts it,
    // and the group's with it, before any timer has run.
    const signals = this.leases.map((lease) => lease.signal);
    this.combined ??= clockedSignal(AbortSignal.any(signals), askingEach(signals));
    return this.combined;
  }

  get releaseRequested(): AbortSignal {
    this.asked ??= AbortSignal.any(this.leases.map((lease) => lease.releaseRequested));
    return this.asked;
  }

  async release(options?: LeaseCallOptions): Promise<boolean> {
    const results = await Promise.allSettled(this.leases.map((lease) => lease.release(options)));
    const failure = results.find((result) => result.status === 'rejected');
    if (failure) throw failure.reason;
    return results.every((result) => result.status === 'fulfilled' && result.value);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      this.reportError(error);
    }
  }
}
