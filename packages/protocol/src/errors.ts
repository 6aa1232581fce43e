import { DlmError, ERROR_CODES, type ErrorCode, isDlmError, isErrorCode } from '@dlm/core';
import type { RpcErrorObject } from './schemas.js';

/** The JSON-RPC error object for an error: `{code, message, data: {code, retryable, ...}}`. */
export function toRpcError(error: unknown): RpcErrorObject {
  const dlm = isDlmError(error)
    ? error
    : new DlmError('INTERNAL', 'internal error', { cause: error });
  return {
    code: ERROR_CODES[dlm.code].rpc,
    message: dlm.message,
    data: { code: dlm.code, retryable: dlm.retryable, ...dlm.details },
  };
}

/** The DlmError a client raises for a JSON-RPC error object it received. */
export function fromRpcError(error: RpcErrorObject): DlmError {
  const wireCode = error.data?.code;
  const code: ErrorCode = isErrorCode(wireCode) ? wireCode : codeForNumber(error.code);
  const { field, ttlRemainingMs, lockDelayRemainingMs, indeterminate, name, limit } =
    error.data ?? {};
  return new DlmError(code, error.message, {
    ...(field === undefined ? {} : { field }),
    ...(limit === undefined ? {} : { limit }),
    ...(name === undefined ? {} : { name }),
    ...(ttlRemainingMs === undefined ? {} : { ttlRemainingMs }),
    ...(lockDelayRemainingMs === undefined ? {} : { lockDelayRemainingMs }),
    ...(indeterminate === undefined ? {} : { indeterminate }),
  });
}

function codeForNumber(rpc: number): ErrorCode {
  for (const [code, entry] of Object.entries(ERROR_CODES)) {
    if (entry.rpc === rpc) return code as ErrorCode;
  }
  return 'INTERNAL';
}
