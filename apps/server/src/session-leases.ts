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
  /** A shared lease may have others of the same name beside it; an exclusive one may not. */
  shared: boolean;
}

/** One name's leases: one (every exclusive lock, most shared ones), or several shared ones. */
type Slot = HeldLease | HeldLease[];

/**
 * The leases one session holds, by name (several of one name when shared: a semaphore's permits
 * taken over one connection). An entry counts while core still follows the lease as held and no
 * other session has taken it over; the others are dropped when looked at.
 */
export class SessionLeases {
  /** Made by the first lease held (an empty Map is 180 bytes, for every session). */
  private held: Map<string, Slot> | undefined;
  private size = 0;

  constructor(
    private readonly session: string,
    private readonly service: Pick<LockService, 'holds'>,
    private readonly holders: LeaseHolders,
  ) {}

  /** The leases this session still holds for `name`, in the order they were granted. */
  all(name: string): readonly HeldLease[] {
    const slot = this.held?.get(name);
    if (!slot) return [];
    const leases = Array.isArray(slot) ? slot : [slot];
    const live = leases.filter((lease) => this.live(name, lease));
    if (live.length !== leases.length) {
      for (const lease of leases)
        if (!live.includes(lease)) this.holders.letGo(name, lease.token, this.session);
      this.store(name, live);
    }
    return live;
  }

  /** The latest lease this session holds for `name` (of `owner`, when given), if any. */
  get(name: string, owner?: string): HeldLease | undefined {
    const leases = this.all(name);
    for (let i = leases.length - 1; i >= 0; i -= 1) {
      const lease = leases[i]!;
      if (owner === undefined || lease.owner === owner) return lease;
    }
    return undefined;
  }

  /** Whether this session holds a lease of `name` for `owner` with `leaseKey` (a re-acquire). */
  holdsWith(name: string, owner: string, leaseKey: string): boolean {
    return this.all(name).some((lease) => lease.owner === owner && lease.leaseKey === leaseKey);
  }

  /** The key this session may present for the lease (`name`, `token`): only if it holds it. */
  keyFor(name: string, token: bigint): string | null {
    const lease = this.all(name).find((held) => held.token === token);
    return lease ? lease.leaseKey : null;
  }

  /** Counts `lease` as this session's, and no longer as any other session's. */
  hold(lease: Lease): void {
    this.held ??= new Map();
    const shared = lease.mode === 'shared';
    const entry: HeldLease = {
      token: lease.token,
      owner: lease.owner,
      leaseKey: lease.leaseKey,
      shared,
    };
    // An exclusive grant ends whatever this session held of the name; a shared one only the
    // same lease (a re-acquire) and exclusive ones, which a shared grant means are over.
    const kept: HeldLease[] = [];
    for (const previous of this.all(lease.name)) {
      if (shared && previous.shared && previous.token !== lease.token) kept.push(previous);
      else if (previous.token !== lease.token)
        this.holders.letGo(lease.name, previous.token, this.session);
    }
    kept.push(entry);
    this.store(lease.name, kept);
    this.holders.claim(lease.name, lease.token, this.session);
  }

  /** The leases this session holds, after dropping those it no longer does. */
  count(): number {
    for (const name of [...(this.held?.keys() ?? [])]) this.all(name);
    return this.size;
  }

  /** How many entries there are, some perhaps stale: `count()` when it matters. */
  get upperBound(): number {
    return this.size;
  }

  /** The session closed: its leases go on, held by nobody here. */
  clear(): void {
    for (const [name, slot] of [...(this.held ?? [])]) {
      for (const lease of Array.isArray(slot) ? slot : [slot]) {
        this.holders.letGo(name, lease.token, this.session);
      }
    }
    this.held?.clear();
    this.size = 0;
  }

  private live(name: string, lease: HeldLease): boolean {
    return (
      this.holders.holder(name, lease.token) === this.session &&
      this.service.holds(name, lease.token)
    );
  }

  /** Sets `name`'s leases, keeping `size` the number of entries. */
  private store(name: string, leases: HeldLease[]): void {
    const held = this.held!;
    const before = held.get(name);
    this.size -= before === undefined ? 0 : Array.isArray(before) ? before.length : 1;
    if (leases.length === 0) held.delete(name);
    else held.set(name, leases.length === 1 ? leases[0]! : leases);
    this.size += leases.length;
  }
}
