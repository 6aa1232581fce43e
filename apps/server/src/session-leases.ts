import type { Lease, LockObserver, LockService } from '@dlm/core';

/**
 * Which session holds each lease granted (or adopted by extend) through this server: the one
 * thing about a lease that only the server knows. Whether the lease still exists is core's to
 * say (`LockService.holds`), and its end reaches this map as an observer event, so nothing here
 * follows a lease's life. One map per server, shared by its sessions: a lease adopted by another
 * session (a holder that reconnected) stops counting for the first.
 */
export interface LeaseHolders extends Pick<LockObserver, 'released' | 'lost'> {
  /** `session` holds the lease now, and whichever session held it before does not. */
  claim(name: string, token: bigint, session: string): void;
  /** The session that holds the lease, if one does. */
  holder(name: string, token: bigint): string | undefined;
  /** `session` lets go of the lease (it closed, or the lease ended): unless another took it. */
  letGo(name: string, token: bigint, session: string): void;
}

function leaseId(name: string, token: bigint): string {
  return `${token}\u0000${name}`;
}

export function createLeaseHolders(): LeaseHolders {
  const holders = new Map<string, string>();
  return {
    claim(name, token, session) {
      holders.set(leaseId(name, token), session);
    },
    holder(name, token) {
      return holders.get(leaseId(name, token));
    },
    letGo(name, token, session) {
      const id = leaseId(name, token);
      if (holders.get(id) === session) holders.delete(id);
    },
    released(name, token) {
      holders.delete(leaseId(name, token));
    },
    lost(event) {
      holders.delete(leaseId(event.name, event.token));
    },
  };
}

/** A lease a session holds, with the key and owner that let it act on it without sending them. */
export interface HeldLease {
  token: bigint;
  owner: string;
  leaseKey: string;
}

/**
 * The leases one session holds, by name. An entry counts while core still follows the lease as
 * held and no other session has taken it over; the others are dropped when looked at.
 */
export class SessionLeases {
  /** Made by the first lease held (an empty Map is 180 bytes, for every session). */
  private held: Map<string, HeldLease> | undefined;

  constructor(
    private readonly session: string,
    private readonly service: Pick<LockService, 'holds'>,
    private readonly holders: LeaseHolders,
  ) {}

  /** The lease this session holds for `name`, if it still does. */
  get(name: string): HeldLease | undefined {
    const lease = this.held?.get(name);
    if (!lease) return undefined;
    if (this.live(name, lease)) return lease;
    this.drop(name, lease);
    return undefined;
  }

  /** The key this session may present for the lease (`name`, `token`): only if it holds it. */
  keyFor(name: string, token: bigint): string | null {
    const lease = this.get(name);
    return lease?.token === token ? lease.leaseKey : null;
  }

  /** Counts `lease` as this session's, and no longer as any other session's. */
  hold(lease: Lease): void {
    this.held ??= new Map();
    const previous = this.held.get(lease.name);
    if (previous && previous.token !== lease.token) this.drop(lease.name, previous);
    this.held.set(lease.name, { token: lease.token, owner: lease.owner, leaseKey: lease.leaseKey });
    this.holders.claim(lease.name, lease.token, this.session);
  }

  /** The leases this session holds, after dropping those it no longer does. */
  count(): number {
    for (const name of [...(this.held?.keys() ?? [])]) this.get(name);
    return this.held?.size ?? 0;
  }

  /** How many entries there are, some perhaps stale: `count()` when it matters. */
  get upperBound(): number {
    return this.held?.size ?? 0;
  }

  /** The session closed: its leases go on, held by nobody here. */
  clear(): void {
    for (const [name, lease] of [...(this.held ?? [])]) this.drop(name, lease);
  }

  private live(name: string, lease: HeldLease): boolean {
    return (
      this.holders.holder(name, lease.token) === this.session &&
      this.service.holds(name, lease.token)
    );
  }

  private drop(name: string, lease: HeldLease): void {
    this.held?.delete(name);
    this.holders.letGo(name, lease.token, this.session);
  }
}
