import { type Corkable, corkUntil, DlmError } from '@dlm/core';
import type { RpcErrorObject } from '@dlm/protocol';
import type { WebSocketLike } from './websocket.js';

/** One JSON-RPC 2.0 request frame. */
export function frame(id: number, method: string, params: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method, params });
}

/**
 * The messages of a frame the server sent — one object, or (multi-message frames) an array of
 * them — or `undefined` (after `onError` for a frame that is not text or not JSON) when there is
 * nothing to act on.
 */
export function readMessages(
  data: unknown,
  onError: (error: DlmError) => void,
): Record<string, unknown> | Array<Record<string, unknown>> | undefined {
  if (typeof data !== 'string') {
    onError(new DlmError('INVALID_REQUEST', 'the server sent a binary frame'));
    return undefined;
  }
  let frame: unknown;
  try {
    frame = JSON.parse(data);
  } catch (error) {
    onError(new DlmError('PARSE_ERROR', 'the server sent invalid JSON', { cause: error }));
    return undefined;
  }
  if (Array.isArray(frame)) return frame.filter(isObject);
  return isObject(frame) ? frame : undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function isRpcError(value: unknown): value is RpcErrorObject {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { code?: unknown }).code === 'number' &&
    typeof (value as { message?: unknown }).message === 'string'
  );
}

export function closeQuietly(ws: WebSocketLike, code: number, reason: string): void {
  try {
    if (code !== 1000 && ws.terminate) ws.terminate();
    else ws.close(code, reason);
  } catch {}
}

/**
 * Under Node's `ws`, holds the TCP socket's writes until the current turn's promise jobs have
 * run, so requests sent in one turn leave in one write instead of one syscall each.
 */
export function cork(ws: WebSocketLike): void {
  const raw = (ws as { _socket?: Partial<Corkable> })._socket;
  if (typeof raw?.cork !== 'function' || typeof raw.uncork !== 'function') return;
  corkUntil(raw as Corkable, process.nextTick);
}
