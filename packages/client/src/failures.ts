import { DlmError } from '@dlm/core';

/**
 * Why a connection attempt failed, in words a user can act on, from what `ws` (or a WHATWG
 * WebSocket) reported: refused, host not found, the HTTP status of a refused upgrade (a wrong
 * path is 404), a TLS failure. The original text follows in parentheses.
 */
export function describeFailure(error: unknown): string {
  const text = messageOf(error);
  const what = kindOfFailure(text, (error as { code?: unknown } | undefined)?.code);
  return what ? `${what} (${text})` : text;
}

function kindOfFailure(text: string, code: unknown): string | undefined {
  const upgrade = /Unexpected server response: (\d+)/.exec(text);
  if (upgrade) return `HTTP ${upgrade[1]} on the WebSocket upgrade`;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  if (code === 'ETIMEDOUT') return 'connect timed out';
  if (code === 'ECONNRESET') return 'connection reset';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return 'host unreachable';
  if (
    (typeof code === 'string' && /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_VERIFY|EPROTO/.test(code)) ||
    /certificate|\bssl\b|\btls\b/i.test(text)
  ) {
    return 'TLS error';
  }
  return undefined;
}

export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return error === undefined ? 'unknown error' : String(error);
}

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

export function unavailable(message: string, cause?: unknown, indeterminate = false): DlmError {
  return new DlmError(
    'UNAVAILABLE',
    message,
    Object.assign(
      {},
      cause === undefined ? {} : { cause },
      indeterminate ? { indeterminate: true } : {},
    ),
  );
}

export function cancelled(): DlmError {
  return new DlmError('CANCELLED', 'the caller stopped waiting');
}

export function closedError(): DlmError {
  return new DlmError('CANCELLED', 'the client is closed');
}
