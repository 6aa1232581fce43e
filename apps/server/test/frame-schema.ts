import { conforms, type MethodName, Methods, type NotificationName } from '@dlm/protocol';

/**
 * Why a frame the server sent breaks the published schema (not JSON-RPC 2.0, a notification or
 * error object off-schema), or undefined when it does not. A reply's result: {@link resultProblem}.
 */
export function frameProblem(frame: Record<string, any>): string | undefined {
  if (frame.jsonrpc !== '2.0') return 'jsonrpc is not 2.0';
  if (frame.id === undefined) {
    const ok = conforms({ notification: frame.method as NotificationName }, frame.params);
    return ok ? undefined : 'bad notification';
  }
  if (frame.error !== undefined && !conforms({ error: true }, frame.error)) {
    return 'bad error object';
  }
  return undefined;
}

/** Why the result of a `method` request breaks its schema; undefined for none or an unknown method. */
export function resultProblem(method: string | undefined, result: unknown): string | undefined {
  if (result === undefined || method === undefined || !Object.hasOwn(Methods, method)) {
    return undefined;
  }
  return conforms({ result: method as MethodName }, result)
    ? undefined
    : `${method} result off-schema`;
}
