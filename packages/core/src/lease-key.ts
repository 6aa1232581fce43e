import { createHash, randomFillSync } from 'node:crypto';

/**
 * The lease key: a secret that only the holder of a lease has. The fencing token is public
 * (resources compare it, `lock.get` shows it) and the owner is a label people read, so neither
 * can prove holding; the key does. Backends never see the key itself, only `hashLeaseKey(key)`,
 * stored with the lease and compared in the same atomic step as the token.
 */

/** 16 random bytes: 128 bits, exactly the 22 characters of the shortest key the protocol allows. */
const KEY_BYTES = 16;

/**
 * Random bytes for the next keys, filled from the CSPRNG 256 keys at a time: one
 * `randomBytes(16)` per acquire was a tenth of a client's CPU time in the benchmark (a call into
 * the crypto library and a new buffer each). Every byte is used once, as Node's own
 * `randomUUID` does with its pool.
 */
const pool = Buffer.alloc(KEY_BYTES * 256);
let used = pool.length;

/** A fresh key of 128 random bits, 22 characters of `[A-Za-z0-9_-]`. */
export function createLeaseKey(): string {
  if (used === pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const key = pool.toString('base64url', used, used + KEY_BYTES);
  used += KEY_BYTES;
  return key;
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
