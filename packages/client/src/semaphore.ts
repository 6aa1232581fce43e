import { type Limits, validateMode, validateName } from '@dlm/core';
import type { AcquireOptions, DlmClient, WithLockOptions } from './client.js';
import type { Lease } from './lease.js';

/** A permit's options: those of `acquire`, the mode and limit being the semaphore's. */
export type PermitOptions = Omit<AcquireOptions, 'mode' | 'limit'>;
/** A scoped permit's options (`withPermit`, `withRead`, `withWrite`): renewed while `fn` runs. */
export type WithPermitOptions = Omit<WithLockOptions, 'mode' | 'limit'>;

/**
 * A semaphore of `limit` permits on one lock name (`client.semaphore(name, limit)`). Each
 * permit is a shared lease of the name with its own fencing token, owner and TTL: release it,
 * extend it or watch its `signal` as any lease. Waiters are served first come first served.
 */
export interface Semaphore {
  readonly name: string;
  readonly limit: number;
  /**
   * Takes a permit, waiting up to `waitMs` while all `limit` are held. Rejects as
   * `client.acquire` does: LOCK_HELD when the wait ends without one, INVALID_PARAMS (field
   * `limit`, `error.details.limit` theirs) when the name's holders use another limit.
   *
   * @example
   * const permit = await pool.acquire({ ttlMs: 10_000, waitMs: 5_000 });
   * try {
   *   await callRateLimitedApi();
   * } finally {
   *   await permit.release();
   * }
   */
  acquire(options: PermitOptions): Promise<Lease>;
  /** Takes a permit if one is free now (and nobody waits ahead); `null` otherwise. */
  tryAcquire(options: Omit<PermitOptions, 'waitMs'>): Promise<Lease | null>;
  /**
   * Runs `fn` holding a permit: renewed in the background while `fn` runs, `fn`'s signal aborted
   * if it is lost, released when `fn` settles. Resolves with `fn`'s value.
   *
   * @example
   * await pool.withPermit({ ttlMs: 10_000, waitMs: 30_000 }, async (signal) => fetchPage(url, { signal }));
   */
  withPermit<T>(
    options: WithPermitOptions,
    fn: (signal: AbortSignal, permit: Lease) => Promise<T>,
  ): Promise<T>;
}

/**
 * A read-write lock on one lock name (`client.readWriteLock(name)`): readers hold it shared
 * (any number at once), a writer exclusive. One FIFO queue serves both: a writer waiting behind
 * readers is granted once they release, and readers that arrive after it wait for it.
 */
export interface ReadWriteLock {
  readonly name: string;
  /**
   * A read lease (shared). Rejects with LOCK_HELD when the wait ends while a writer holds it or
   * waits ahead.
   *
   * @example
   * await using lease = await config.read({ ttlMs: 5_000, waitMs: 5_000 });
   * const value = await loadConfig(lease.token);
   */
  read(options: PermitOptions): Promise<Lease>;
  /** A write lease (exclusive): once no reader or writer holds the name. */
  write(options: PermitOptions): Promise<Lease>;
  /** A read lease if one can be had now; `null` otherwise. */
  tryRead(options: Omit<PermitOptions, 'waitMs'>): Promise<Lease | null>;
  /** A write lease if the name is free now; `null` otherwise. */
  tryWrite(options: Omit<PermitOptions, 'waitMs'>): Promise<Lease | null>;
  /** Runs `fn` holding a read lease (renewed meanwhile, released after). */
  withRead<T>(
    options: WithPermitOptions,
    fn: (signal: AbortSignal, lease: Lease) => Promise<T>,
  ): Promise<T>;
  /**
   * Runs `fn` holding the write lease (renewed meanwhile, released after).
   *
   * @example
   * await config.withWrite({ ttlMs: 5_000, waitMs: 10_000 }, async (signal, lease) => {
   *   await saveConfig(next, { fencingToken: lease.token, signal });
   * });
   */
  withWrite<T>(
    options: WithPermitOptions,
    fn: (signal: AbortSignal, lease: Lease) => Promise<T>,
  ): Promise<T>;
}

type Acquirer = Pick<DlmClient, 'acquire' | 'tryAcquire' | 'withLock'>;

/** Options as sent for `mode`: the caller's own `mode`/`limit`, if any sneaked in, replaced. */
function moded<O extends object>(options: O, mode: 'shared' | 'exclusive', limit?: number) {
  const {
    mode: _mode,
    limit: _limit,
    ...rest
  } = options as O & {
    mode?: unknown;
    limit?: unknown;
  };
  if (mode === 'exclusive') return rest as O;
  return Object.assign({}, rest, { mode, ...(limit === undefined ? {} : { limit }) }) as O;
}

/** `client.semaphore`: `limit` checked now (INVALID_PARAMS, field `limit`), as the server would. */
export function createSemaphore(
  client: Acquirer,
  limits: Limits,
  name: string,
  limit: number,
): Semaphore {
  validateName(name, limits);
  validateMode('shared', limit, limits);
  return {
    name,
    limit,
    acquire: (options) => client.acquire(name, moded(options, 'shared', limit)),
    tryAcquire: (options) => client.tryAcquire(name, moded(options, 'shared', limit)),
    withPermit: (options, fn) => client.withLock(name, moded(options, 'shared', limit), fn),
  };
}

/** `client.readWriteLock`: readers are shared holders with the server's default limit. */
export function createReadWriteLock(client: Acquirer, limits: Limits, name: string): ReadWriteLock {
  validateName(name, limits);
  return {
    name,
    read: (options) => client.acquire(name, moded(options, 'shared')),
    write: (options) => client.acquire(name, moded(options, 'exclusive')),
    tryRead: (options) => client.tryAcquire(name, moded(options, 'shared')),
    tryWrite: (options) => client.tryAcquire(name, moded(options, 'exclusive')),
    withRead: (options, fn) => client.withLock(name, moded(options, 'shared'), fn),
    withWrite: (options, fn) => client.withLock(name, moded(options, 'exclusive'), fn),
  };
}
