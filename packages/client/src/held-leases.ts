import { parseToken } from '@dlm/core';
import { type LeaseHandle, type LostReason, leaseKey } from './lease.js';

/**
 * The leases this client holds, by server-side lease (`leaseKey(name, token)`): what
 * `lock.lost` is matched against, what a reconnect re-binds, and what `close()` releases.
 * A key maps to a set because a deliberate re-entry (same owner, same key) gets the same lease.
 */
export class HeldLeases {
  private readonly byKey = new Map<string, Set<LeaseHandle>>();

  add(handle: LeaseHandle): void {
    let set = this.byKey.get(handle.key);
    if (!set) {
      set = new Set();
      this.byKey.set(handle.key, set);
    }
    set.add(handle);
  }

  remove(handle: LeaseHandle): void {
    const set = this.byKey.get(handle.key);
    set?.delete(handle);
    if (set?.size === 0) this.byKey.delete(handle.key);
  }

  /** Whether the server-side lease `name`/`token` is in use here. */
  has(name: string, token: bigint): boolean {
    return this.byKey.has(leaseKey(name, token));
  }

  /** `lock.lost`: every handle on that lease loses it. */
  lose(name: string, wireToken: string, reason: LostReason): void {
    for (const handle of this.handlesOf(name, wireToken)) handle.lose(reason);
  }

  /** `lock.releaseRequested`: every handle on that lease is asked to let go. */
  askRelease(name: string, wireToken: string, reason: string | undefined): void {
    for (const handle of this.handlesOf(name, wireToken)) handle.askRelease(reason);
  }

  private handlesOf(name: string, wireToken: string): LeaseHandle[] {
    let key: string;
    try {
      key = leaseKey(name, parseToken(wireToken));
    } catch {
      return [];
    }
    return [...(this.byKey.get(key) ?? [])];
  }

  /** The key of a live lease held here by `owner` on `name`, for a deliberate re-entry. */
  keyFor(name: string, owner: string): string | undefined {
    for (const set of this.byKey.values()) {
      for (const handle of set) {
        if (handle.lease.name === name && handle.lease.owner === owner && !handle.lease.lost) {
          return handle.leaseKey;
        }
      }
    }
    return undefined;
  }

  /** A new session: auto-extended leases extend at once, which ties them to it. */
  reconnected(): void {
    for (const set of this.byKey.values()) for (const handle of set) handle.reconnected();
  }

  all(): LeaseHandle[] {
    return [...this.byKey.values()].flatMap((set) => [...set]);
  }
}
