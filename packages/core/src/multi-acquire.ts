import type { Clock, Timer } from './clock.js';
import { DlmError, isDlmError } from './errors.js';
import { asDlmError } from './lock-errors.js';
import type {
  AcquireOptions,
  ExtendOptions,
  Lease,
  LostEvent,
  ReleaseRequest,
} from './lock-service.js';
import type { AroundBackendCall } from './observer.js';
import type { ReleaseRequestedEvent } from './release-requests.js';
import {
  type Limits,
  type LockMode,
  validateMode,
  validateName,
  validateOwner,
  validateTtl,
  validateWait,
} from './validation.js';

/** One lock of an `acquireAll` set. */
export interface LockSpec {
  name: string;
  /** Default `exclusive` (see `AcquireOptions.mode`). */
  mode?: LockMode;
  /** Only with `shared` (see `AcquireOptions.limit`). */
  limit?: number;
}

export interface AcquireAllOptions {
  /** 1 to `limits.maxLocksPerRequest` locks, names distinct. */
  locks: readonly LockSpec[];
  owner: string;
  ttlMs: number;
  /** 0 (the default): every lock is a try-lock. Otherwise the whole set may take this long. */
  waitMs?: number;
  /** Ends the wait early with CANCELLED (what was granted is given back). */
  signal?: AbortSignal;
  /** One key for every lease of the set (see `AcquireOptions.leaseKey`). */
  leaseKey?: string;
  /** Called for each lease of the set that ends other than by a release. */
  onLost?: (event: LostEvent) => void;
  /** Called for each lease of the set whose holder is asked to let go. */
  onReleaseRequested?: (event: ReleaseRequestedEvent) => void;
  /** See `AcquireOptions.aroundBackendCall`. */
  aroundBackendCall?: AroundBackendCall | undefined;
}

/** What the set is taken with: the service's own acquire, release and extend. */
export interface SetOperations {
  readonly clock: Clock;
  readonly limits: Readonly<Limits>;
  checkName(value: unknown): string;
  acquire(options: AcquireOptions): Promise<Lease>;
  release(request: ReleaseRequest): Promise<void>;
  extend(options: ExtendOptions): Promise<Lease>;
}

/**
 * Every lock of the set, or none (Redisson's MultiLock, Curator's InterProcessMultiLock, without
 * their deadlocks). The locks are taken one at a time in ONE canonical order, the names sorted
 * by UTF-16 code units: two calls over overlapping sets then never hold one lock each while
 * waiting for the other's. On any failure the leases already granted are released before the
 * error is thrown, which names the lock that could not be had (`details.name`); a release that
 * could not be confirmed marks it `indeterminate`. While a later lock is waited for, the earlier
 * leases are extended before they could run out, and once all are held, those granted long ago
 * are extended so that every lease of the set starts about now. Leases come back in request
 * order. The same owner and key sent again get the same leases (each acquire is idempotent).
 */
export async function acquireAll(ops: SetOperations, options: AcquireAllOptions): Promise<Lease[]> {
  const names = validateLocks(options.locks, ops.limits, ops.checkName);
  const owner = validateOwner(options.owner, ops.limits);
  const ttlMs = validateTtl(options.ttlMs, ops.limits);
  const waitMs = validateWait(options.waitMs, ops.limits);
  if (options.signal?.aborted) throw new DlmError('CANCELLED', 'acquireAll was cancelled');
  const held = new Map<string, Lease>();
  const keeper = new KeepAlive(ops, held, ttlMs, options);
  let current = '';
  try {
    const deadline = ops.clock.now() + waitMs;
    for (const name of [...names].sort(byCodeUnits)) {
      current = name;
      const { mode, limit } = options.locks[names.indexOf(name)]!;
      const lease = await ops.acquire({
        name,
        ...(mode === undefined ? {} : { mode }),
        ...(limit === undefined ? {} : { limit }),
        owner,
        ttlMs,
        waitMs: Math.max(0, Math.floor(deadline - ops.clock.now())),
        signal: keeper.signal,
        ...(options.leaseKey === undefined ? {} : { leaseKey: options.leaseKey }),
        ...(options.onLost ? { onLost: options.onLost } : {}),
        ...(options.onReleaseRequested ? { onReleaseRequested: options.onReleaseRequested } : {}),
        aroundBackendCall: options.aroundBackendCall,
      });
      keeper.granted(lease);
    }
    keeper.stop();
    await keeper.refreshAll();
  } catch (error) {
    keeper.stop();
    const reason = keeper.failure ?? error;
    const unconfirmed = await releaseAll(ops, held);
    throw forLock(reason, keeper.failedName ?? current, unconfirmed);
  }
  return names.map((name) => held.get(name)!);
}

/** Sorts names by UTF-16 code units: the same order in every process and every language. */
function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function invalidLocks(message: string): DlmError {
  return new DlmError('INVALID_PARAMS', `locks ${message}`, { field: 'locks' });
}

/**
 * An `acquireAll` set, checked as the service checks it, for a caller that must know it is valid
 * before it calls (a client before sending, a server before its permission check): an array of
 * 1 to `limits.maxLocksPerRequest` `{name, mode?}` entries, names distinct (INVALID_PARAMS,
 * field `locks`), each name and mode valid (fields `name`, `mode`, `limit`, the message saying
 * which entry). Returns the names in request order.
 */
export function validateLocks(
  locks: unknown,
  limits: Readonly<Limits>,
  checkName: (value: unknown) => string = (value) => validateName(value, limits),
): string[] {
  const max = limits.maxLocksPerRequest;
  if (!Array.isArray(locks)) throw invalidLocks('must be an array of {name} objects');
  if (locks.length < 1 || locks.length > max) throw invalidLocks(`must list 1-${max} locks`);
  const names: string[] = [];
  const seen = new Set<string>();
  locks.forEach((entry: unknown, index) => {
    if (typeof entry !== 'object' || entry === null) {
      throw invalidLocks(`[${index}] must be an object with a name`);
    }
    const { name, mode, limit } = entry as { name?: unknown; mode?: unknown; limit?: unknown };
    const checked = inEntry(index, () => checkName(name));
    inEntry(index, () => validateMode(mode, limit, limits));
    if (seen.has(checked)) throw invalidLocks(`name ${JSON.stringify(checked)} more than once`);
    seen.add(checked);
    names.push(checked);
  });
  return names;
}

/** Runs a field check of entry `index`, its error saying which entry (field unchanged). */
function inEntry<T>(index: number, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (!isDlmError(error, 'INVALID_PARAMS')) throw error;
    throw new DlmError('INVALID_PARAMS', `locks[${index}].${error.message}`, error.details);
  }
}

/**
 * The error the set fails with: the cause's code and message, naming the lock that could not be
 * had, `indeterminate` when a granted lease may still be held.
 */
function forLock(error: unknown, name: string, unconfirmed: boolean): unknown {
  if (!isDlmError(error) || error.code === 'INVALID_PARAMS') return error;
  return new DlmError(
    error.code,
    error.message,
    Object.assign({}, error.details, {
      name,
      ...(unconfirmed ? { indeterminate: true } : {}),
      cause: error,
    }),
  );
}

/**
 * Gives back every lease granted so far, newest first. A lease already gone (NOT_HOLDER) is not
 * held; a release the backend did not confirm is tried once more. True: one stayed unconfirmed.
 */
async function releaseAll(ops: SetOperations, held: Map<string, Lease>): Promise<boolean> {
  let unconfirmed = false;
  for (const lease of [...held.values()].reverse()) {
    if (!(await releasedOrGone(ops, lease)) && !(await releasedOrGone(ops, lease))) {
      unconfirmed = true;
    }
  }
  return unconfirmed;
}

async function releasedOrGone(ops: SetOperations, lease: Lease): Promise<boolean> {
  try {
    await ops.release({ name: lease.name, token: lease.token, leaseKey: lease.leaseKey });
    return true;
  } catch (error) {
    return isDlmError(error, 'NOT_HOLDER');
  }
}

/**
 * Keeps the leases of a set alive while the rest of it is waited for: every third of the TTL
 * each one is extended. An extend that fails ends the wait (the set can no longer be had
 * whole); `failure` then says why. Also the one signal the set's acquires run under: the
 * caller's, or this keeper's failure.
 */
class KeepAlive {
  readonly #controller = new AbortController();
  readonly #grantedAt = new Map<string, number>();
  #timer: Timer | undefined;
  #stopped = false;
  #detach: () => void = () => {};
  failure: DlmError | undefined;
  failedName: string | undefined;

  constructor(
    private readonly ops: SetOperations,
    private readonly held: Map<string, Lease>,
    private readonly ttlMs: number,
    private readonly options: AcquireAllOptions,
  ) {
    const { signal } = options;
    if (signal) {
      const onAbort = () => this.#controller.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      this.#detach = () => signal.removeEventListener('abort', onAbort);
    }
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  granted(lease: Lease): void {
    this.held.set(lease.name, lease);
    this.#grantedAt.set(lease.name, this.ops.clock.now());
    this.#arm();
  }

  #arm(): void {
    if (this.#stopped || this.#timer) return;
    this.#timer = this.ops.clock.setTimer(() => void this.#tick(), this.ttlMs / 3);
  }

  stop(): void {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#timer = undefined;
    this.#detach();
  }

  /** Once all are held: the leases granted over a tenth of the TTL ago start again now. */
  async refreshAll(): Promise<void> {
    const now = this.ops.clock.now();
    for (const [name, at] of this.#grantedAt) {
      if (now - at > this.ttlMs / 10) await this.#extend(name);
    }
  }

  async #tick(): Promise<void> {
    this.#timer = undefined;
    try {
      for (const name of [...this.held.keys()]) await this.#extend(name);
    } catch (error) {
      // Once stopped, the set is complete or failing already: its own path decides.
      if (this.#stopped) return;
      this.failure = isDlmError(error, 'NOT_HOLDER')
        ? new DlmError('LOCK_HELD', `${error.message} while the rest of the set was waited for`)
        : asDlmError(error);
      this.#controller.abort(this.failure);
      return;
    }
    this.#arm();
  }

  async #extend(name: string): Promise<void> {
    const lease = this.held.get(name)!;
    this.failedName = name;
    const extended = await this.ops.extend({
      name,
      token: lease.token,
      ttlMs: this.ttlMs,
      leaseKey: lease.leaseKey,
      ...(this.options.onLost ? { onLost: this.options.onLost } : {}),
      aroundBackendCall: this.options.aroundBackendCall,
    });
    this.failedName = undefined;
    this.held.set(name, extended);
    this.#grantedAt.set(name, this.ops.clock.now());
  }
}
