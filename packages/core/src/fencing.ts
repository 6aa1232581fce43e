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
 */
export interface FenceGuard {
  /** True (and recorded) when `token` is not older than the newest token seen for `key`. */
  accept(key: string, token: bigint): boolean;
  highest(key: string): bigint | undefined;
}

export function createFenceGuard(): FenceGuard {
  const highest = new Map<string, bigint>();
  return {
    accept(key, token) {
      const seen = highest.get(key);
      if (seen !== undefined && token < seen) return false;
      highest.set(key, token);
      return true;
    },
    highest: (key) => highest.get(key),
  };
}
