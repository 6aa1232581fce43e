import { DlmError } from './errors.js';

/** The bounds every request is checked against. Servers report them in `session.hello`. */
export interface Limits {
  maxNameBytes: number;
  maxOwnerBytes: number;
  minTtlMs: number;
  maxTtlMs: number;
  maxWaitMs: number;
  /** The most locks one `acquireAll` may list. */
  maxLocksPerRequest: number;
  /** The most shared holders a name admits (a shared request's `limit`, and its default). */
  maxHolders: number;
  /**
   * The longest lock-delay an acquire may ask for (`lockDelayMs`): after a lease ends by expiry
   * or revocation, nobody is granted its name for that long.
   */
  maxLockDelayMs: number;
  /**
   * The longest cap on holding an acquire may ask for (`maxHoldMs`): no extend keeps a lease
   * past its grant plus its cap.
   */
  maxHoldMs: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxNameBytes: 256,
  maxOwnerBytes: 128,
  minTtlMs: 100,
  maxTtlMs: 86_400_000,
  maxWaitMs: 300_000,
  maxLocksPerRequest: 64,
  maxHolders: 10_000,
  maxLockDelayMs: 60_000,
  maxHoldMs: 604_800_000,
};

// U+0000–U+001F and U+007F.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

function invalid(field: string, message: string): DlmError {
  return new DlmError('INVALID_PARAMS', `${field} ${message}`, { field });
}

function checkText(value: unknown, field: string, maxBytes: number): string {
  if (typeof value !== 'string') throw invalid(field, 'must be a string');
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes < 1 || bytes > maxBytes) throw invalid(field, `must be 1-${maxBytes} UTF-8 bytes`);
  if (CONTROL.test(value)) throw invalid(field, 'must not contain control characters');
  // A lone surrogate cannot be encoded as UTF-8: it would be stored as U+FFFD and name a
  // different lock than the one asked for.
  if (!value.isWellFormed()) throw invalid(field, 'must be well-formed Unicode');
  return value;
}

export function validateName(value: unknown, limits: Limits = DEFAULT_LIMITS): string {
  return checkText(value, 'name', limits.maxNameBytes);
}

/** The most UTF-8 bytes of a release request's `reason`. */
export const MAX_REASON_BYTES = 256;

/** A release request's optional `reason`: 1-256 UTF-8 bytes of text, or absent. */
export function validateReason(value: unknown): string | undefined {
  return value === undefined ? undefined : checkText(value, 'reason', MAX_REASON_BYTES);
}

export function validateOwner(value: unknown, limits: Limits = DEFAULT_LIMITS): string {
  return checkText(value, 'owner', limits.maxOwnerBytes);
}

function checkInteger(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw invalid(field, 'must be an integer number of milliseconds');
  }
  if (value < min || value > max) throw invalid(field, `must be in [${min}, ${max}]`);
  return value;
}

export function validateTtl(value: unknown, limits: Limits = DEFAULT_LIMITS): number {
  return checkInteger(value, 'ttlMs', limits.minTtlMs, limits.maxTtlMs);
}

export function validateWait(value: unknown, limits: Limits = DEFAULT_LIMITS): number {
  return checkInteger(value ?? 0, 'waitMs', 0, limits.maxWaitMs);
}

/** An optional yes/no field: a boolean or absent (INVALID_PARAMS naming `field` otherwise). */
export function validateFlag(value: unknown, field: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw invalid(field, 'must be true or false');
  return value;
}

/** An acquire's `lockDelayMs`: an integer in [0, `limits.maxLockDelayMs`], default 0 (none). */
export function validateLockDelay(
  value: unknown,
  limits: Pick<Limits, 'maxLockDelayMs'> = DEFAULT_LIMITS,
): number {
  return checkInteger(value ?? 0, 'lockDelayMs', 0, limits.maxLockDelayMs);
}

/**
 * An acquire's `maxHoldMs`: absent (no cap), or an integer in [`ttlMs`, `limits.maxHoldMs`].
 * The bounds are said in the caller's units, milliseconds.
 */
export function validateMaxHold(
  value: unknown,
  ttlMs: number,
  limits: Pick<Limits, 'maxHoldMs'> = DEFAULT_LIMITS,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw invalid('maxHoldMs', 'must be an integer number of milliseconds');
  }
  if (value < ttlMs) {
    throw invalid('maxHoldMs', `must be at least ttlMs (${ttlMs} ms), got ${value} ms`);
  }
  if (value > limits.maxHoldMs) {
    throw invalid('maxHoldMs', `must be at most ${limits.maxHoldMs} ms, got ${value} ms`);
  }
  return value;
}

const LEASE_KEY = /^[A-Za-z0-9_-]{22,128}$/;

/** A client-chosen lease key: 22-128 characters of `[A-Za-z0-9_-]` (see lease-key.ts). */
export function validateLeaseKey(value: unknown): string {
  if (typeof value !== 'string' || !LEASE_KEY.test(value)) {
    // The message never echoes the value: it is meant to be a secret.
    throw invalid('leaseKey', 'must be 22-128 characters of [A-Za-z0-9_-]');
  }
  return value;
}

/**
 * How a lock is held: by one `exclusive` holder, or `shared` by up to `limit` holders at once
 * (a read lock when the limit is `maxHolders`, a semaphore of `limit` permits otherwise).
 */
export type LockMode = 'exclusive' | 'shared';

/** A request's mode and holder limit, checked (`validateMode`). Exclusive: `limit` 1. */
export interface ModeSpec {
  mode: LockMode;
  limit: number;
}

/**
 * A request's `mode` (default `exclusive`) and `limit`, checked: a limit is an integer in
 * [1, `limits.maxHolders`], only with `shared` (INVALID_PARAMS, field `limit`, with
 * `exclusive`), and defaults to `maxHolders` (a read lock). Whether the backend grants shared
 * modes at all is the service's check, not this one's: a client checks its inputs here before
 * it knows the server's backend.
 */
export function validateMode(
  mode: unknown,
  limit: unknown,
  limits: Pick<Limits, 'maxHolders'> = DEFAULT_LIMITS,
): ModeSpec {
  if (mode !== undefined && mode !== 'exclusive' && mode !== 'shared') {
    throw invalid('mode', 'must be "exclusive" or "shared"');
  }
  if (mode !== 'shared') {
    if (limit !== undefined) throw invalid('limit', 'is only for mode "shared"');
    return { mode: 'exclusive', limit: 1 };
  }
  if (limit === undefined) return { mode, limit: limits.maxHolders };
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit)) {
    throw invalid('limit', 'must be an integer number of holders');
  }
  if (limit < 1 || limit > limits.maxHolders) {
    throw invalid('limit', `must be in [1, ${limits.maxHolders}] holders`);
  }
  return { mode, limit };
}

/** The fields of one lock's acquire besides its name, owner and lease key. */
export interface AcquireFields {
  ttlMs?: unknown;
  waitMs?: unknown;
  mode?: unknown;
  limit?: unknown;
  requestRelease?: unknown;
  lockDelayMs?: unknown;
  maxHoldMs?: unknown;
}

/**
 * An acquire's fields besides its name, owner and lease key, checked by the one code that both
 * the client (before it sends) and the service run: the same code, field and message either way.
 * What a backend cannot do (shared modes, lock-delays, caps) is the service's to refuse.
 */
export function validateAcquireFields(fields: AcquireFields, limits: Limits = DEFAULT_LIMITS) {
  const ttlMs = validateTtl(fields.ttlMs, limits);
  const waitMs = validateWait(fields.waitMs, limits);
  const { mode, limit } = validateMode(fields.mode, fields.limit, limits);
  const requestRelease = validateFlag(fields.requestRelease, 'requestRelease');
  const lockDelayMs = validateLockDelay(fields.lockDelayMs, limits);
  const maxHoldMs = validateMaxHold(fields.maxHoldMs, ttlMs, limits);
  return { ttlMs, waitMs, mode, limit, requestRelease, lockDelayMs, maxHoldMs };
}
