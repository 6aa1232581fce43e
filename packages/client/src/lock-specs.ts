import { type Limits, type LockSpec, validateLocks } from '@dlm/core';

export type { LockSpec };

/**
 * The locks of an `acquireAll` as the wire sends them (a name alone stands for `{ name }`),
 * checked before sending by core's own check of a set: the server's code, field and message.
 */
export function checkLockSpecs(specs: readonly (string | LockSpec)[], limits: Limits): LockSpec[] {
  const locks: unknown = Array.isArray(specs)
    ? specs.map((spec: string | LockSpec) => (typeof spec === 'string' ? { name: spec } : spec))
    : specs;
  validateLocks(locks, limits);
  return (locks as LockSpec[]).map(({ name, mode, limit }) => ({
    name,
    ...(mode === undefined ? {} : { mode }),
    ...(limit === undefined ? {} : { limit }),
  }));
}
