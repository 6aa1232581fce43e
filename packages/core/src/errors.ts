/**
 * Every failure dlm reports carries one of these codes. The wire protocol maps each code to a
 * JSON-RPC error number (see `@dlm/protocol`); match on `code`, never on `instanceof`, across
 * packages.
 */
export const ERROR_CODES = {
  PARSE_ERROR: { rpc: -32700, retryable: false },
  INVALID_REQUEST: { rpc: -32600, retryable: false },
  METHOD_NOT_FOUND: { rpc: -32601, retryable: false },
  INVALID_PARAMS: { rpc: -32602, retryable: false },
  INTERNAL: { rpc: -32603, retryable: false },
  LOCK_HELD: { rpc: 1001, retryable: true },
  NOT_HOLDER: { rpc: 1002, retryable: false },
  UNAVAILABLE: { rpc: 1003, retryable: true },
  UNAUTHENTICATED: { rpc: 1004, retryable: false },
  FORBIDDEN: { rpc: 1005, retryable: false },
  LIMIT_EXCEEDED: { rpc: 1006, retryable: true },
  CANCELLED: { rpc: 1007, retryable: false },
  HELLO_REQUIRED: { rpc: 1008, retryable: false },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Extra facts an error carries to the caller (and onto the wire as `error.data`). */
export interface ErrorDetails {
  /** INVALID_PARAMS: which field was wrong. */
  field?: string;
  /** LOCK_HELD: how long the current holder's lease still runs, when known. */
  ttlRemainingMs?: number;
  /** LOCK_HELD: the name is free but in its lock-delay for this long yet. */
  lockDelayRemainingMs?: number;
  /** UNAVAILABLE: the write may or may not have happened (its reply was lost). */
  indeterminate?: boolean;
  /** `acquireAll`'s failure: the lock of the set that could not be had. */
  name?: string;
  /** INVALID_PARAMS with field `limit`: the limit the current shared holders agreed on. */
  limit?: number;
}

export class DlmError extends Error {
  override readonly name = 'DlmError';
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, options: ErrorDetails & { cause?: unknown } = {}) {
    const { cause, ...details } = options;
    super(message, cause === undefined ? undefined : { cause });
    this.code = code;
    this.retryable = ERROR_CODES[code].retryable;
    this.details = details;
  }
}

export function isDlmError(error: unknown, code?: ErrorCode): error is DlmError {
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { name?: unknown }).name === 'DlmError' &&
    typeof (error as { code?: unknown }).code === 'string' &&
    (code === undefined || (error as { code: string }).code === code)
  );
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CODES, value);
}

/**
 * Wraps whatever a backend client threw into UNAVAILABLE, keeping the original as `cause`.
 * A DlmError passes through unchanged, so adapters can call this on every catch. `backend`
 * names the store in the message unless the client's own words already do: a client library's
 * `connect ECONNREFUSED 127.0.0.1:5432` alone reads like an outage of dlm itself.
 */
export function toUnavailable(
  error: unknown,
  what: string,
  indeterminate = false,
  backend?: string,
): DlmError {
  if (isDlmError(error)) return error;
  const reason = error instanceof Error ? error.message : String(error);
  const named = backend === undefined || reason.includes(backend) ? '' : `${backend}: `;
  return new DlmError('UNAVAILABLE', `${what}: ${named}${reason}`, {
    cause: error,
    ...(indeterminate ? { indeterminate: true } : {}),
  });
}
