import {
  DlmError,
  isDlmError,
  type Limits,
  type LockMode,
  validateMode,
  validateName,
} from '@dlm/core';

/** One lock of an `acquireAll`: its name, and how it is held. */
export interface LockSpec {
  name: string;
  /** `exclusive` (the default). `shared` is reserved: refused with INVALID_PARAMS, field `mode`. */
  mode?: LockMode;
}

function invalidLocks(message: string): DlmError {
  return new DlmError('INVALID_PARAMS', `locks ${message}`, { field: 'locks' });
}

/** Runs a check of entry `index`, its error saying which entry (field unchanged), as core does. */
function inEntry<T>(index: number, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (!isDlmError(error, 'INVALID_PARAMS')) throw error;
    throw new DlmError('INVALID_PARAMS', `locks[${index}].${error.message}`, error.details);
  }
}

/**
 * The locks of an `acquireAll` as the wire sends them, checked before sending with the server's
 * rules, codes, fields and messages (core's `acquireAll` validation, which it does not export).
 */
export function checkLockSpecs(
  specs: readonly (string | LockSpec)[],
  limits: Limits,
): { name: string; mode?: LockMode }[] {
  const max = limits.maxLocksPerRequest;
  if (!Array.isArray(specs)) throw invalidLocks('must be an array of {name} objects');
  if (specs.length < 1 || specs.length > max) throw invalidLocks(`must list 1-${max} locks`);
  const seen = new Set<string>();
  return specs.map((spec, index) => {
    const { name, mode } = typeof spec === 'string' ? { name: spec, mode: undefined } : spec;
    inEntry(index, () => validateName(name, limits));
    inEntry(index, () => validateMode(mode, undefined));
    if (seen.has(name)) throw invalidLocks(`name ${JSON.stringify(name)} more than once`);
    seen.add(name);
    return mode === undefined ? { name } : { name, mode };
  });
}
