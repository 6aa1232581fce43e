import type { BackendQueue } from './queue-driver.js';
import type { LockMode } from './validation.js';

/**
 * The contract every storage adapter implements. Each primitive is one atomic step on the
 * backend (a Lua script, an etcd transaction, a ZooKeeper multi-op); core builds waiting,
 * fairness, validation and lock-lost detection on top.
 *
 * Errors: a primitive that cannot reach its backend, or does not hear back in bounded time,
 * rejects with a `DlmError` of code UNAVAILABLE (`toUnavailable` helps), with
 * `indeterminate: true` when a write may have been applied but its reply was lost.
 * Primitives never reject with LOCK_HELD or NOT_HOLDER: those outcomes are return values.
 *
 * The lease key. A grant's token is public and its owner is a label, so what proves holding is
 * a third value: core hashes the holder's secret lease key (`hashLeaseKey`) and hands the
 * adapter only the hash, as `keyHash`. An adapter (built-in or third-party) keeps it like this:
 * - stores `keyHash` with the lease, in the same write that grants it (beside the token and
 *   owner in the Redis value, in the etcd key's value, in the ZooKeeper znode's data, in the SQL
 *   row), and never returns it from `inspect`, `list` or `watch`;
 * - `release`/`extend` with a `keyHash` succeed only when both the token and the stored hash
 *   match, checked in the same atomic step that frees or extends the lease (the Lua script, the
 *   etcd transaction's compare, the ZooKeeper versioned op after reading the data at that
 *   version, the SQL `WHERE`): a check in a separate read would race with a new grant;
 * - `tryAcquire` by the owner that holds the lock refreshes that lease only when `keyHash`
 *   matches too (otherwise it is another requester: `granted: false`);
 * - a request without `keyHash` is a token-only (resp. owner-only) match, and a lease granted
 *   without one stores none: core leaves it out only for an operator's revoke on a backend
 *   without `revoke`, never for a caller's release or extend. A lease stored without a hash
 *   (written by an older version) matches only token-only requests.
 * Compare hashes as plain strings; they are fixed-length digests of random keys, so a timing
 * side channel tells nothing useful.
 *
 * Holders, modes and limits (only with `capabilities.sharedModes`; core never sends a shared
 * request to an adapter without it). A name's holders are either one `exclusive` holder or 1 to
 * `limit` `shared` holders, never both, and all shared holders at one time agree on `limit`
 * (a read lock is `shared` with the server's `maxHolders` as its limit; a semaphore of N permits
 * is `shared` with limit N). Each holder is its own lease, with its own token, owner, key hash
 * and deadline; `release` and `extend` (by token and key hash) touch that holder only, and an
 * expiry ends that holder only. `tryAcquire`, in one atomic step:
 * - the same owner with the same key hash in the same mode and limit: that holder's lease,
 *   refreshed, same token (an idempotent re-acquire, as for exclusive locks);
 * - the same owner with the same key hash in the other mode: `conflict: { field: 'mode' }`
 *   (no upgrade or downgrade in place);
 * - shared, while shared holders with another limit hold it: `conflict: { field: 'limit',
 *   limit }` with theirs;
 * - shared: granted when there is no exclusive holder and fewer than `limit` holders;
 *   exclusive: granted when there is no holder at all;
 * - otherwise `granted: false` with `ttlRemainingMs` of the holder whose end would let this
 *   request in (shared at the limit: the soonest to end; exclusive: the latest).
 * Tokens: every grant, shared or exclusive, gets a token above every earlier grant's for the
 * name, so a writer's token is above every earlier reader's. A queue (`queue`, core's wait loop
 * over the backend's driver) orders both modes in one FIFO by core's grant rule
 * (`grant-rule.ts`): a shared entry may be granted when no exclusive entry is ahead of it and
 * the name has room; an exclusive entry when it is first and the name is free.
 */

export interface BackendCapabilities {
  /**
   * `strict`: per name, every grant's token is greater than every earlier grant's token
   * (across expiry, release and — when `durableAcrossRestart` — restarts).
   * `best-effort`: tokens usually grow but the backend cannot promise it (Redlock).
   */
  fencing: 'strict' | 'best-effort';
  /** The shortest lease the backend can hold. Requests below it are raised to it. */
  minTtlMs: number;
  /** Leases are rounded up to a multiple of this (etcd counts seconds). 1 means exact. */
  ttlGranularityMs: number;
  /** Held locks and the token high-water mark survive a restart of the backend. */
  durableAcrossRestart: boolean;
  /**
   * The backend itself orders waiters (it offers `queue`, a queue driver core's wait loop runs
   * over), so FIFO holds across several dlm servers, not only among one server's waiters.
   */
  fairQueue: boolean;
  /** `watch` reports expiries as they happen (not only releases). */
  expiryEvents: boolean;
  /**
   * The adapter grants `mode: 'shared'` requests (read locks, semaphores; see the top of this
   * file). Absent or false: core refuses them (INVALID_PARAMS, field `mode`) and never sends one,
   * so an adapter written before shared modes keeps its contract.
   */
  sharedModes?: boolean;
  /**
   * The adapter keeps lock-delays (`AcquireRequest.lockDelayMs`, see `lockDelayOf`). Absent or
   * false: core refuses a `lockDelayMs` above 0 (INVALID_PARAMS, field `lockDelayMs`) and never
   * sends one.
   */
  lockDelay?: boolean;
  /**
   * The adapter keeps caps on holding (`AcquireRequest.maxHoldMs`, `Grant.holdRemainingMs`).
   * Absent or false: core refuses a `maxHoldMs` (INVALID_PARAMS, field `maxHoldMs`) and never
   * sends one.
   */
  maxHold?: boolean;
}

export interface AcquireRequest {
  name: string;
  owner: string;
  ttlMs: number;
  /** `hashLeaseKey` of the lease key, stored with the lease (see the top of this file). */
  keyHash?: string | undefined;
  /** Absent: `exclusive`. `shared` only reaches adapters with `capabilities.sharedModes`. */
  mode?: LockMode | undefined;
  /** With `shared` (always given then): the most holders at once, 1 to `Limits.maxHolders`. */
  limit?: number | undefined;
  /**
   * Only with `capabilities.lockDelay`, only exclusive, above 0: the lease's lock-delay. When
   * this lease ends by expiry (at its deadline) or revocation (then), nobody is granted the
   * name until `lockDelayMs` after that end; a release ends it with none. The adapter keeps
   * the delay with the lease, in the same atomic step as the grant (and extends and refreshes
   * keep it), so it holds for every dlm server on the store and survives their restarts;
   * `tryAcquire` evaluates it through core's grant rule (`RuleHolders.lockDelayRemainingMs`)
   * and answers `granted: false` with `lockDelayRemainingMs` (and `ttlRemainingMs`, the same)
   * while it runs.
   */
  lockDelayMs?: number | undefined;
  /**
   * Only with `capabilities.maxHold`, at least `ttlMs`: the lease's cap on holding. The adapter
   * keeps the cap as an absolute time with the lease, in the same atomic step as the grant, so
   * that every dlm server on the store clamps by it: no extend or refresh (an idempotent
   * re-acquire keeps the first grant's cap) sets the lease's end past it, and one that would is
   * granted up to the cap only (its `ttlMs` says how much); at or past the cap an extend answers
   * null (an adapter whose store may keep the lease a little longer, etcd's whole seconds,
   * ends it in that step). Where the store has a clock the cap is on it (Redis `TIME`,
   * PostgreSQL's clock, ZooKeeper's node times); a store whose transactions have none must keep
   * the granting server's wall-clock time and clamp by the extending server's, and say that the
   * servers' clocks must then agree to within the error one accepts on the cap.
   */
  maxHoldMs?: number | undefined;
}

/** Which lease a release or extend is about: the token, and the key's hash when known. */
export interface HolderProof {
  name: string;
  token: bigint;
  /** Must equal the lease's stored hash; absent: the token alone (an operator's revoke). */
  keyHash?: string | undefined;
}

export interface Grant {
  name: string;
  owner: string;
  token: bigint;
  /**
   * The lease the backend actually granted (≥ the request, rounded to its granularity), but
   * never past the lease's cap on holding (then less than asked).
   */
  ttlMs: number;
  /**
   * With a cap on holding (`AcquireRequest.maxHoldMs`): how long the lease had left to its cap
   * at this step, on the store's clock. Absent: the lease has no cap (or, on a fresh grant, the
   * adapter did not say: core counts the request's `maxHoldMs`).
   */
  holdRemainingMs?: number | undefined;
}

export type AcquireResult =
  | { granted: true; grant: Grant }
  | {
      granted: false;
      /**
       * The remaining lease of the holder whose end would let the request in (the only holder's,
       * for an exclusive lock), when the backend could tell.
       */
      ttlRemainingMs?: number;
      /**
       * The request can never be granted as asked while the current holders hold it: the same
       * owner and key hold it in the other mode (`mode`), or shared holders agreed on another
       * limit (`limit`, theirs). Core answers INVALID_PARAMS with that field; it does not wait.
       */
      conflict?: LockConflict;
      /** The name is free but in its lock-delay, for this long yet (see `lockDelayMs`). */
      lockDelayRemainingMs?: number;
    };

/** Why a request cannot be granted as asked (see `AcquireResult`). */
export type LockConflict = { field: 'mode' } | { field: 'limit'; limit: number };

/** One holder of a name, as `inspect` reports it. */
export interface HolderState {
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
}

/**
 * Who holds a name. `owner`, `token` and `ttlRemainingMs` are those of the holder with the
 * highest token (the only holder, for an exclusive lock).
 */
export interface LockState {
  name: string;
  owner: string;
  token: bigint;
  ttlRemainingMs: number;
  /** Absent: `exclusive` (an adapter without shared modes need not say). */
  mode?: LockMode | undefined;
  /** With `shared`: the limit the holders agreed on. */
  limit?: number | undefined;
  /** Every holder, ordered by token. Absent: the one holder above. */
  holders?: HolderState[] | undefined;
}

/** What `watch` reports. `token` and `owner` are those of the lease the event is about. */
export interface LockEvent {
  name: string;
  /**
   * `releaseRequested` changes nothing: someone asked the name's holders to let go
   * (`LockBackend.requestRelease`); it carries no token, only the request's `reason`.
   */
  type: 'acquired' | 'released' | 'expired' | 'revoked' | 'releaseRequested';
  token?: bigint;
  owner?: string;
  /**
   * The mode of the lease the event is about. An adapter with `capabilities.sharedModes` sets it
   * on every `acquired` event that carries a token: core reads an exclusive grant with a higher
   * token as the end of every lease it follows for the name, and a shared one as the end of an
   * exclusive lease only. Absent: `exclusive`.
   */
  mode?: LockMode | undefined;
  /** The number of holders after the change, when the backend knows it in the same step. */
  holders?: number | undefined;
  /** With `releaseRequested`: the reason the requester gave, if any. */
  reason?: string | undefined;
}

export type Unsubscribe = () => void;

export interface LockBackend {
  /** Shown to clients in `session.hello` (`embedded`, `redis`, …). */
  readonly kind: string;
  readonly capabilities: BackendCapabilities;
  /**
   * Grants the lock when it is free (or already held by the same owner with the same `keyHash`:
   * then the same token with the lease refreshed). Never waits for a held lock.
   */
  tryAcquire(request: AcquireRequest): Promise<AcquireResult>;
  /** Frees the lock when `token` (and `keyHash`) are the current holder's. False when not. */
  release(request: HolderProof): Promise<boolean>;
  /**
   * Resets the lease to `ttlMs` when `token` (and `keyHash`) are the holder's; null when not.
   * With a cap on holding, to its cap at most, and null at or past it (see `maxHoldMs`).
   */
  extend(request: HolderProof & { ttlMs: number }): Promise<Grant | null>;
  /** The current holders (every one of them, with `sharedModes`), or null when free. */
  inspect(name: string): Promise<LockState | null>;
  /**
   * Calls `listener` on releases (and expiries, with `expiryEvents`) of `name`, and on grants
   * where the backend can tell. Waits in core are woken by these, so an adapter must deliver
   * every release; it may deliver extra events. With `followChanges`, a release or grant need
   * only be delivered while a wait (through any instance) or a follower is on the name.
   */
  watch(name: string, listener: (event: LockEvent) => void): Unsubscribe;
  /**
   * Optional: the service calls it while `name` has watchers of its own (`LockService.watch`),
   * and what it returns once the last of them is gone. The service also `watch`es every name it
   * holds or waits on; a backend whose stores announce changes only to the instances that need
   * them (PostgreSQL sends a NOTIFY only for names with waiters or followers) registers the name
   * here, so that every grant and release of a watched name reaches `watch`. An `inspect` of the
   * name called after it must see every change the registration might have missed.
   */
  followChanges?(name: string): Unsubscribe;
  /**
   * Only with `capabilities.fairQueue`: the backend's own queue (etcd revisions, ZooKeeper
   * sequence nodes, a table or sorted set of waiter entries), as a driver factory. Core runs its
   * one wait loop over it (`queue-driver.ts`), so that waiters on several dlm servers are served
   * in order.
   */
  readonly queue?: BackendQueue | undefined;
  /** Forcibly ends every current lease of the name, whoever holds it (admin use). False when free. */
  revoke?(name: string): Promise<boolean>;
  /**
   * Asks `name`'s holders to let go, on every dlm server sharing the backend: publishes, on the
   * backend's own event channel (the one `watch` hears), an event `{ name, type:
   * 'releaseRequested', reason }` that every `watch` of `name` through any instance sharing the
   * store then delivers, once. Nothing is released. Delivery is at most once (a watcher that is
   * reconnecting misses it, as a pub/sub message would be). Absent: core delivers it to its own
   * watchers only, which is right for a backend that only one process can open (embedded).
   */
  requestRelease?(name: string, reason: string | undefined): Promise<void>;
  /**
   * Only with `capabilities.lockDelay`: how long the name's lock-delay has left, 0 when it has
   * none (held names say 0: a live lease's delay starts only at its end).
   */
  lockDelayOf?(name: string): Promise<number>;
  /** Lists held locks whose names start with `prefix` (admin use). */
  list?(prefix: string): Promise<LockState[]>;
  /**
   * Optional: the cheapest round trip that proves the backend answers (Redis `PING`, an etcd
   * status call), for readiness checks. Resolves when it answered, rejects (UNAVAILABLE) when
   * not, within the adapter's own call time-out. Without it a server probes with `inspect` of a
   * fixed name, which every adapter has; optional so that existing adapters keep satisfying the
   * contract.
   */
  ping?(): Promise<void>;
  close(): Promise<void>;
}
