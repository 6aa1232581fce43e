import { conforms, type MethodName, type NotificationName, Notifications } from '@dlm/protocol';

/** The key a request id is remembered under (ids are numbers or strings). */
export function idKey(id: unknown): string {
  return JSON.stringify(id);
}

/** A frame for a failure message, cut to 300 characters. */
export function show(value: unknown): string {
  const text = JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

/**
 * What is wrong with a frame the server sent, against the protocol's schemas (undefined when
 * nothing is). `methods` maps request ids to methods, to check a result against its method.
 */
export function schemaProblem(
  methods: ReadonlyMap<string, MethodName>,
  frame: unknown,
): string | undefined {
  if (typeof frame !== 'object' || frame === null || Array.isArray(frame)) {
    return 'the server sent a frame that is not a JSON object';
  }
  const message = frame as Record<string, unknown>;
  if (message.jsonrpc !== '2.0') return 'the server sent a frame without jsonrpc "2.0"';
  if ('error' in message) {
    return conforms({ error: true }, message.error) ? undefined : 'an error object off-schema';
  }
  if ('result' in message) {
    const method = methods.get(idKey(message.id));
    if (method && !conforms({ result: method }, message.result)) {
      return `a ${method} result off-schema`;
    }
    return undefined;
  }
  if (typeof message.method === 'string' && Object.hasOwn(Notifications, message.method)) {
    return conforms({ notification: message.method as NotificationName }, message.params)
      ? undefined
      : `a ${message.method} notification off-schema`;
  }
  return 'the server sent a frame that is neither a reply nor a known notification';
}
