import { type TSchema, Type } from '@sinclair/typebox';
import {
  ErrorObject,
  type MethodName,
  Methods,
  type NotificationName,
  Notifications,
  RequestId,
} from './schemas.js';

/**
 * Whole-frame schemas (the JSON-RPC envelope around the bodies in `schemas.ts`), one per
 * message a client sends or receives. They are composed from the same schemas the types come
 * from, so the AsyncAPI document and the per-message JSON Schema files cannot drift from them.
 */

const JsonRpc = Type.Literal('2.0');

/** Methods whose params are all optional: a request may leave `params` out. */
function paramsOptional(method: MethodName): boolean {
  const schema = Methods[method].params as { required?: string[] };
  return !schema.required?.length;
}

/** `{jsonrpc, id, method, params}` for one method. */
export function requestFrame(method: MethodName): TSchema {
  const params = Methods[method].params;
  return Type.Object(
    {
      jsonrpc: JsonRpc,
      id: RequestId,
      method: Type.Literal(method),
      params: paramsOptional(method) ? Type.Optional(params) : params,
    },
    { title: `${method} request`, description: `A ${method} request (client → server).` },
  );
}

/** `{jsonrpc, id, result}` answering one method. */
export function resultFrame(method: MethodName): TSchema {
  return Type.Object(
    { jsonrpc: JsonRpc, id: RequestId, result: Methods[method].result },
    { title: `${method} result`, description: `The success reply to ${method}.` },
  );
}

/** `{jsonrpc, id, error}`: the error reply to any request; `id` is null when unreadable. */
export const ErrorFrame: TSchema = Type.Object(
  { jsonrpc: JsonRpc, id: Type.Union([RequestId, Type.Null()]), error: ErrorObject },
  {
    title: 'error reply',
    description:
      'The error reply to any request. `id` is null when the request id could not be read ' +
      '(not JSON, a batch, a binary frame, a bad id). Match on `error.data.code`.',
  },
);

/** `{jsonrpc, method, params}` for one server notification. */
export function notificationFrame(method: NotificationName): TSchema {
  return Type.Object(
    { jsonrpc: JsonRpc, method: Type.Literal(method), params: Notifications[method] },
    {
      title: `${method} notification`,
      description: `The ${method} notification (server → client).`,
    },
  );
}

/**
 * Extension (multi-message frames): once `session.hello` agreed on `frames: "multi"`, a frame
 * may be a JSON array of 1 or more of the messages `members` allows, each one independent of
 * the others (answered on its own; not a JSON-RPC batch).
 */
function multiFrame(members: TSchema[], title: string, description: string): TSchema {
  return Type.Array(Type.Union(members), { minItems: 1, title, description });
}

/** The client's multi-message frame: requests, each answered on its own. */
export function multiRequestFrame(): TSchema {
  const requests = (Object.keys(Methods) as MethodName[]).map(requestFrame);
  return multiFrame(
    requests,
    'multi-message request frame',
    'Several requests in one text frame (only after session.hello agreed on frames "multi"). ' +
      'Each is served as if it came in a frame of its own, in array order; its reply comes when ' +
      'it is ready, never held for the others.',
  );
}

/** The server's multi-message frame: replies and notifications that were ready together. */
export function multiReplyFrame(): TSchema {
  const replies = [
    ...(Object.keys(Methods) as MethodName[]).map(resultFrame),
    ErrorFrame,
    ...(Object.keys(Notifications) as NotificationName[]).map(notificationFrame),
  ];
  return multiFrame(
    replies,
    'multi-message reply frame',
    'Replies and notifications the server had ready in one turn, in the order it would have ' +
      'sent them one per frame (only after session.hello agreed on frames "multi"). They may ' +
      'answer requests of different frames.',
  );
}

/** One message of the protocol, named as in the AsyncAPI document and `dist/schemas/`. */
export interface ProtocolMessage {
  /** `lock.acquire.request`, `lock.acquire.result`, `error`, `lock.lost`, ... */
  name: string;
  direction: 'client-to-server' | 'server-to-client';
  schema: TSchema;
}

/** Every message of protocol v1, in a stable order. */
export function protocolMessages(): ProtocolMessage[] {
  const messages: ProtocolMessage[] = [];
  for (const method of Object.keys(Methods) as MethodName[]) {
    messages.push({
      name: `${method}.request`,
      direction: 'client-to-server',
      schema: requestFrame(method),
    });
    messages.push({
      name: `${method}.result`,
      direction: 'server-to-client',
      schema: resultFrame(method),
    });
  }
  messages.push({ name: 'error', direction: 'server-to-client', schema: ErrorFrame });
  for (const method of Object.keys(Notifications) as NotificationName[]) {
    messages.push({
      name: method,
      direction: 'server-to-client',
      schema: notificationFrame(method),
    });
  }
  messages.push(
    { name: 'multi.request', direction: 'client-to-server', schema: multiRequestFrame() },
    { name: 'multi.reply', direction: 'server-to-client', schema: multiReplyFrame() },
  );
  return messages;
}
