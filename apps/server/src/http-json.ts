import type { ServerResponse } from 'node:http';
import { type ErrorCode, isDlmError } from '@dlm/core';

/** HTTP status for each protocol error code the HTTP API can answer with. */
const STATUS: Partial<Record<ErrorCode, number>> = {
  PARSE_ERROR: 400,
  INVALID_REQUEST: 400,
  INVALID_PARAMS: 400,
  METHOD_NOT_FOUND: 405,
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  LIMIT_EXCEEDED: 429,
  UNAVAILABLE: 503,
  CANCELLED: 503,
  NOT_HOLDER: 409,
  LOCK_HELD: 409,
};

/**
 * The HTTP-only codes (the protocol has no such codes): a lock or route that is not there, and
 * plain HTTP on the WebSocket endpoint.
 */
export type HttpErrorCode = ErrorCode | 'NOT_FOUND' | 'UPGRADE_REQUIRED';

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    ...headers,
  });
  response.end(text);
}

/** `{error: {code, message, …details}}`, the same codes and details as the protocol's errors. */
export function sendError(
  response: ServerResponse,
  status: number,
  code: HttpErrorCode,
  message: string,
  details: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): void {
  sendJson(response, status, { error: { code, message, ...details } }, headers);
}

/** Answers with a thrown error: a DlmError keeps its code and details, anything else is INTERNAL. */
export function sendThrown(response: ServerResponse, error: unknown): void {
  if (isDlmError(error)) {
    sendError(response, STATUS[error.code] ?? 500, error.code, error.message, {
      retryable: error.retryable,
      ...error.details,
    });
    return;
  }
  sendError(response, 500, 'INTERNAL', 'internal error', { retryable: false });
}
