/**
 * One held lock. Kept deliberately small (six fields): at the scale target of 100,000 held
 * locks every byte here is multiplied. The TTL itself is not kept; `deadline` says all.
 */
export interface Lease {
  readonly name: string;
  owner: string;
  token: bigint;
  /** `hashLeaseKey` of the holder's key; undefined for a lease granted without one. */
  keyHash: string | undefined;
  /** Monotonic ms (`clock.now()`) at which the lease runs out. */
  deadline: number;
  /** Position in the deadline heap; -1 when not in it. */
  heapIndex: number;
  /**
   * With a cap on holding: the monotonic ms past which no extend keeps the lease. Set only on
   * capped leases, so the others stay six fields.
   */
  capAt?: number;
}

/** Past this many holders, a name's holders are indexed by key hash (below, a scan is cheaper). */
const INDEX_FROM = 16;

/**
 * The holders of a name held in `shared` mode: 1 to `limit` leases, ordered by token (a new
 * holder's token is above every earlier one's, so it is appended). A name held exclusively maps
 * to its one `Lease` directly, so only shared names pay for this object and its array.
 *
 * Finding a requester's own holder (same owner, same key hash) is a scan while the name has few
 * holders; past `INDEX_FROM` a map by key hash (a digest of a random key, so one per holder)
 * answers it. Should two holders ever share a key hash (a key reused under two owner labels),
 * the name falls back to scanning for as long as it is held.
 */
export class SharedHolders {
  readonly holders: Lease[];
  private byKeyHash: Map<string, Lease> | undefined;
  private scanOnly = false;

  constructor(
    readonly limit: number,
    holders: Lease[],
  ) {
    this.holders = holders;
    if (holders.length > INDEX_FROM) this.buildIndex();
  }

  get size(): number {
    return this.holders.length;
  }

  /** The holder with this owner and key hash (at most one: a second acquire refreshes). */
  find(owner: string, keyHash: string | undefined): Lease | undefined {
    if (this.byKeyHash !== undefined && keyHash !== undefined) {
      const lease = this.byKeyHash.get(keyHash);
      return lease !== undefined && lease.owner === owner ? lease : undefined;
    }
    for (const lease of this.holders) {
      if (lease.owner === owner && lease.keyHash === keyHash) return lease;
    }
    return undefined;
  }

  /** Appends a holder whose token is above every current one's; returns the new count. */
  add(lease: Lease): number {
    const count = this.holders.push(lease);
    if (this.byKeyHash !== undefined) this.indexOne(lease);
    else if (count > INDEX_FROM && !this.scanOnly) this.buildIndex();
    return count;
  }

  /** Takes out the holder with `token`; returns it, or undefined when it does not hold. */
  remove(token: bigint): Lease | undefined {
    const index = this.indexOf(token);
    if (index < 0) return undefined;
    const [lease] = this.holders.splice(index, 1);
    const keyHash = lease!.keyHash;
    if (keyHash !== undefined && this.byKeyHash?.get(keyHash) === lease) {
      this.byKeyHash!.delete(keyHash);
    }
    return lease;
  }

  /** The holder with `token`, by binary search over the token order. */
  get(token: bigint): Lease | undefined {
    const index = this.indexOf(token);
    return index < 0 ? undefined : this.holders[index];
  }

  private indexOf(token: bigint): number {
    const holders = this.holders;
    let low = 0;
    let high = holders.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const at = holders[middle]!.token;
      if (at === token) return middle;
      if (at < token) low = middle + 1;
      else high = middle - 1;
    }
    return -1;
  }

  private buildIndex(): void {
    this.byKeyHash = new Map();
    for (const lease of this.holders) {
      this.indexOne(lease);
      if (this.scanOnly) return;
    }
  }

  private indexOne(lease: Lease): void {
    const index = this.byKeyHash!;
    // A holder without a key hash is found by a scan (requests without one scan too).
    if (lease.keyHash === undefined) return;
    if (index.has(lease.keyHash)) {
      this.scanOnly = true;
      this.byKeyHash = undefined;
      return;
    }
    index.set(lease.keyHash, lease);
  }
}

/** What the backend keeps per held name. */
export type Held = Lease | SharedHolders;
