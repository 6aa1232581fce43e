import { DlmError } from './errors.js';

/** The largest fencing token: tokens are positive signed 64-bit integers. */
export const MAX_TOKEN = 2n ** 63n - 1n;

const DECIMAL = /^[1-9][0-9]{0,18}$/;

/**
 * Reads a fencing token from the wire (a decimal string) or from code (a bigint). Anything
 * else — numbers (which lose precision past 2^53), signs, leading zeros, out of range — is
 * INVALID_PARAMS naming `field`.
 */
export function parseToken(value: unknown, field = 'token'): bigint {
  let token: bigint | undefined;
  if (typeof value === 'bigint') token = value;
  else if (typeof value === 'string' && DECIMAL.test(value)) token = BigInt(value);
  if (token === undefined || token < 1n || token > MAX_TOKEN) {
    throw new DlmError(
      'INVALID_PARAMS',
      `${field} must be the decimal string of an integer in [1, 2^63-1]`,
      { field },
    );
  }
  return token;
}

export function formatToken(token: bigint): string {
  return token.toString(10);
}

/**
 * The resource-side half of fencing: remembers, per key, the highest token it accepted and
 * refuses anything lower. An equal token is accepted, so one holder may write many times.
 *
 * A lease can end while its holder is paused (a GC pause, a stopped VM, a slow network) and the
 * holder may then write after the next holder did. The lock cannot stop that late write; the
 * resource can, by refusing a token lower than one it has already seen (property S1). Tokens are
 * per lock name, so key the guard by what the lock protects (usually the lock's name).
 *
 * This guard keeps its memory in-process: it protects a resource that lives in this process.
 * A resource in a database or in Redis needs the same rule applied in the same atomic step as the
 * write (a conditional `UPDATE`, a Lua script): the root README's "Fencing on the resource side"
 * has tested recipes for PostgreSQL and Redis.
 *
 * @example
 * const guard = createFenceGuard();
 * function write(key: string, token: bigint, value: string) {
 *   guard.assert(key, token); // NOT_HOLDER when a newer holder already wrote
 *   store.set(key, value);
 * }
 */
export interface FenceGuard {
  /**
   * True (and recorded) when `token` is not older than the newest token accepted for `key`;
   * false when it is. A string is read as the wire's decimal form (`parseToken`).
   */
  accept(key: string, token: bigint | string): boolean;
  /**
   * `accept`, throwing NOT_HOLDER when the token is stale. Returns the token as a bigint.
   * Throws INVALID_PARAMS (field `token`) for something that is not a token.
   */
  assert(key: string, token: bigint | string): bigint;
  /** The highest token accepted for `key`, if any. */
  highest(key: string): bigint | undefined;
}

export interface FenceGuardOptions {
  /** Highest tokens to start from (restored from where the resource keeps them). */
  initial?: Iterable<readonly [key: string, token: bigint]>;
}

/**
 * A fence guard for a resource held in this process (see `FenceGuard`). Check and record happen
 * in one synchronous step, so concurrent writers in one event loop cannot slip between them:
 * call `accept`/`assert` immediately before the write, with no `await` in between.
 */
export function createFenceGuard(options: FenceGuardOptions = {}): FenceGuard {
  const highest = new Map<string, bigint>();
  for (const [key, token] of options.initial ?? []) highest.set(key, parseToken(token));
  function accept(key: string, token: bigint | string): boolean {
    const value = parseToken(token);
    const seen = highest.get(key);
    if (seen !== undefined && value < seen) return false;
    highest.set(key, value);
    return true;
  }
  return {
    accept,
    assert(key, token) {
      const value = parseToken(token);
      if (!accept(key, value)) {
        throw new DlmError(
          'NOT_HOLDER',
          `stale fencing token ${value} for ${JSON.stringify(key)}: ${highest.get(key)} was already accepted`,
        );
      }
      return value;
    },
    highest: (key) => highest.get(key),
  };
}
