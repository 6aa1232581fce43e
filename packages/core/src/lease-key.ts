import { createHash, randomBytes } from 'node:crypto';

/**
 * The lease key: a secret that only the holder of a lease has. The fencing token is public
 * (resources compare it, `lock.get` shows it) and the owner is a label people read, so neither
 * can prove holding; the key does. Backends never see the key itself, only `hashLeaseKey(key)`,
 * stored with the lease and compared in the same atomic step as the token.
 */

/** 16 random bytes: 128 bits, exactly the 22 characters of the shortest key the protocol allows. */
const KEY_BYTES = 16;

/** A fresh key of 128 random bits, 22 characters of `[A-Za-z0-9_-]`. */
export function createLeaseKey(): string {
  return randomBytes(KEY_BYTES).toString('base64url');
}

/**
 * What a backend stores and compares: SHA-256 of the key, 43 characters of `[A-Za-z0-9_-]`
 * (no `:` or space, so it fits in any adapter's value encoding). A key has at least 128 random
 * bits when dlm or its clients make it, so a plain hash (no salt, no stretching) is enough: the
 * hash hides the key from whoever can read the backend's data, and nobody can guess it.
 */
export function hashLeaseKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('base64url');
}
