import { DlmError } from '@dlm/core';
import { type MethodName, Methods, type RpcRequestId } from '@dlm/protocol';

export interface RpcRequest {
  id: RpcRequestId;
  method: MethodName;
  params: Record<string, unknown>;
}

/** Why a frame is not a request we can serve, and the id to answer with (null if unknown). */
export interface RpcRejection {
  id: RpcRequestId | null;
  error: DlmError;
}

function isRequestId(value: unknown): value is RpcRequestId {
  return typeof value === 'string' || (typeof value === 'number' && Number.isSafeInteger(value));
}

/**
 * Turns one text frame into a request, or says exactly what is wrong with it. Unknown extra
 * fields are ignored, as the protocol promises.
 */
export function parseRequest(text: string): RpcRequest | RpcRejection {
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return { id: null, error: new DlmError('PARSE_ERROR', 'the frame is not valid JSON') };
  }
  if (Array.isArray(message)) {
    return {
      id: null,
      error: new DlmError(
        'INVALID_REQUEST',
        'batches are not supported: send one request per frame',
      ),
    };
  }
  if (typeof message !== 'object' || message === null) {
    return { id: null, error: new DlmError('INVALID_REQUEST', 'a request must be a JSON object') };
  }
  const { jsonrpc, id, method, params } = message as Record<string, unknown>;
  if (!isRequestId(id)) {
    return {
      id: null,
      error: new DlmError(
        'INVALID_REQUEST',
        id === undefined
          ? 'a request needs an id (dlm defines no client notifications)'
          : 'id must be an integer or a string',
      ),
    };
  }
  if (jsonrpc !== '2.0') {
    return { id, error: new DlmError('INVALID_REQUEST', 'jsonrpc must be "2.0"') };
  }
  if (typeof method !== 'string') {
    return { id, error: new DlmError('INVALID_REQUEST', 'method must be a string') };
  }
  if (!Object.hasOwn(Methods, method)) {
    return {
      id,
      error: new DlmError(
        'METHOD_NOT_FOUND',
        `unknown method ${JSON.stringify(method.slice(0, 64))}`,
      ),
    };
  }
  if (
    params !== undefined &&
    (typeof params !== 'object' || params === null || Array.isArray(params))
  ) {
    return {
      id,
      error: new DlmError('INVALID_PARAMS', 'params must be an object (by-name parameters)', {
        field: 'params',
      }),
    };
  }
  return { id, method: method as MethodName, params: (params ?? {}) as Record<string, unknown> };
}
