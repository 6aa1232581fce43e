import type { Grant, LockBackend } from '@dlm/core';

/**
 * The lease `backend.tryAcquire` grants `owner` on `name`; a refusal fails the test. For tests
 * that need a held lock to start from, not for testing the grant itself.
 *
 * @example
 * const lease = await granted(backend, lockName('fencing'), 'a', 5_000);
 */
export async function granted(
  backend: LockBackend,
  name: string,
  owner: string,
  ttlMs = 10_000,
): Promise<Grant> {
  const result = await backend.tryAcquire({ name, owner, ttlMs });
  if (!result.granted) throw new Error(`expected ${owner} to be granted ${name}`);
  return result.grant;
}
