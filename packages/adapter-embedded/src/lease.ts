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
}

/**
 * The holders of a name held in `shared` mode: 1 to `limit` leases, ordered by token (a new
 * holder's token is above every earlier one's, so it is appended). A name held exclusively maps
 * to its one `Lease` directly, so only shared names pay for this object and its array.
 */
export class SharedHolders {
  constructor(
    readonly limit: number,
    readonly holders: Lease[],
  ) {}
}

/** What the backend keeps per held name. */
export type Held = Lease | SharedHolders;
