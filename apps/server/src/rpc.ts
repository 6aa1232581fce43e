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
  const frame = parseJson(text);
  return isRejection(frame) ? frame : parseMessage(frame);
}

/**
 * The messages of one text frame on a connection that agreed on multi-message frames: a JSON
 * array of 1 or more messages, or one message (an object, or anything else, which
 * {@link parseMessage} refuses). Each is then served on its own.
 */
export function parseMessages(text: string): unknown[] | RpcRejection {
  const frame = parseJson(text);
  if (isRejection(frame)) return frame;
  if (!Array.isArray(frame)) return [frame];
  if (frame.length === 0) {
    return {
      id: null,
      error: new DlmError('INVALID_REQUEST', 'an empty array frame holds no message'),
    };
  }
  return frame;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {
      [REJECTED]: true,
      id: null,
      error: new DlmError('PARSE_ERROR', 'the frame is not valid JSON'),
    };
  }
}

const REJECTED = Symbol('rejected');

function isRejection(value: unknown): value is RpcRejection {
  return typeof value === 'object' && value !== null && REJECTED in value;
}

/** One message (a frame's, or a member of a multi-message frame) as a request, or why not. */
export function parseMessage(message: unknown, inArray = false): RpcRequest | RpcRejection {
  if (Array.isArray(message)) {
    return {
      id: null,
      error: new DlmError(
        'INVALID_REQUEST',
        inArray
          ? 'a message of a multi-message frame must be a JSON object, not an array'
          : 'batches are not supported: send one request at a time (a WebSocket session may agree on multi-message frames in session.hello)',
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
