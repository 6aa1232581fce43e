import { ERROR_CODES } from '@dlm/core';
import { MAX_PAYLOAD_BYTES, PROTOCOL, SUBPROTOCOL, WS_PATH } from './constants.js';
import { protocolMessages } from './frames.js';
import { type MethodName, Methods, type NotificationName, Notifications } from './schemas.js';
import { jsonCopy, summary } from './summaries.js';

const CHANNEL = 'v1';

/**
 * The protocol as an AsyncAPI 3.0 document, describing the server: it receives requests on the
 * one channel (`/v1/ws`) and replies on the same channel, and sends notifications. Every
 * message payload is a whole JSON-RPC frame, composed from the TypeBox schemas the TypeScript
 * types come from. Published as `@dlm/protocol/asyncapi.json`.
 */
export function protocolAsyncApi(): Record<string, unknown> {
  const messages: Record<string, unknown> = {};
  const channelMessages: Record<string, unknown> = {};
  for (const message of protocolMessages()) {
    const isError = message.name === 'error';
    const isMulti = message.name.startsWith('multi.');
    messages[message.name] = {
      name: message.name,
      title: (message.schema as { title?: string }).title ?? message.name,
      summary: isError
        ? 'The error reply to any request.'
        : isMulti
          ? 'Several independent messages in one frame (extension, after hello agreed on it).'
          : summary(message.name.replace(/\.(request|result)$/, '') as MethodName),
      contentType: 'application/json',
      ...(!isMulti &&
      (message.name.endsWith('.request') || message.name.endsWith('.result') || isError)
        ? { correlationId: { $ref: '#/components/correlationIds/requestId' } }
        : {}),
      payload: jsonCopy(message.schema),
      ...(isError
        ? {
            // The stable error names (error.data.code), their JSON-RPC numbers and retryability.
            'x-error-codes': Object.fromEntries(
              Object.entries(ERROR_CODES).map(([code, { rpc, retryable }]) => [
                code,
                { rpc, retryable },
              ]),
            ),
          }
        : {}),
    };
    channelMessages[message.name] = { $ref: `#/components/messages/${message.name}` };
  }

  const channelRef = { $ref: `#/channels/${CHANNEL}` };
  const messageRef = (name: string) => ({ $ref: `#/channels/${CHANNEL}/messages/${name}` });
  // The server receives requests (and replies on the same channel) and sends notifications.
  const operation = (
    action: 'receive' | 'send',
    method: MethodName | NotificationName,
    message: string,
  ) => ({
    action,
    channel: channelRef,
    title: method,
    summary: summary(method),
    messages: [messageRef(message)],
  });
  const operations: Record<string, unknown> = {};
  for (const method of Object.keys(Methods) as MethodName[]) {
    operations[method] = {
      ...operation('receive', method, `${method}.request`),
      reply: {
        channel: channelRef,
        messages: [messageRef(`${method}.result`), messageRef('error')],
      },
    };
  }
  for (const method of Object.keys(Notifications) as NotificationName[]) {
    operations[method] = operation('send', method, method);
  }
  // Extension: multi-message frames, once session.hello agreed on them.
  const multi = (action: 'receive' | 'send', title: string, about: string, message: string) => ({
    action,
    channel: channelRef,
    title,
    summary: about,
    messages: [messageRef(message)],
  });
  operations['multi.receive'] = multi(
    'receive',
    'multi-message request frame',
    'Several independent requests in one frame (after hello agreed on frames "multi").',
    'multi.request',
  );
  operations['multi.send'] = multi(
    'send',
    'multi-message reply frame',
    'Replies and notifications ready together, in one frame (frames "multi").',
    'multi.reply',
  );

  return {
    asyncapi: '3.0.0',
    id: 'urn:dlm:protocol:v1',
    info: {
      title: 'dlm lock server',
      version: '1.0.0',
      description:
        `dlm wire protocol ${PROTOCOL}: JSON-RPC 2.0 over WebSocket, one object per text frame, ` +
        `subprotocol \`${SUBPROTOCOL}\`. This document describes the server. Requests are ` +
        'correlated with replies by `id`; replies may arrive in any order. Extension: after ' +
        '`session.hello` agreed on `frames: "multi"`, a frame either way may be a JSON array of ' +
        'independent messages (multi.request, multi.reply), each answered on its own — not a ' +
        'JSON-RPC batch. See SPEC.md and GUIDE.md in @dlm/protocol.',
      license: { name: 'MIT' },
    },
    defaultContentType: 'application/json',
    servers: {
      local: {
        host: 'localhost:7070',
        protocol: 'ws',
        pathname: WS_PATH,
        description: 'A dlm server with its default port (`wss` when it has TLS).',
      },
    },
    channels: {
      [CHANNEL]: {
        address: WS_PATH,
        title: `WebSocket endpoint, subprotocol ${SUBPROTOCOL}`,
        description:
          `Offer the subprotocol \`${SUBPROTOCOL}\`; a client offering only others is refused ` +
          `with HTTP 400. A frame larger than ${MAX_PAYLOAD_BYTES} bytes closes the connection ` +
          'with code 1009. Binary frames get INVALID_REQUEST.',
        servers: [{ $ref: '#/servers/local' }],
        messages: channelMessages,
        bindings: {
          ws: {
            bindingVersion: '0.1.0',
            method: 'GET',
            headers: {
              type: 'object',
              properties: {
                'Sec-WebSocket-Protocol': { type: 'string', const: SUBPROTOCOL },
              },
            },
          },
        },
      },
    },
    operations,
    components: {
      correlationIds: {
        requestId: {
          description: 'A reply echoes the id of its request.',
          location: '$message.payload#/id',
        },
      },
      messages,
    },
  };
}

/**
 * One JSON Schema document per message, keyed by file name (`lock.acquire.request.json`, ...),
 * as published under `@dlm/protocol/schemas/`.
 */
export function messageSchemaFiles(): Record<string, Record<string, unknown>> {
  const files: Record<string, Record<string, unknown>> = {};
  for (const message of protocolMessages()) {
    files[`${message.name}.json`] = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: `https://dlm.dev/protocol/v1/${message.name}.json`,
      ...jsonCopy(message.schema as Record<string, unknown>),
    };
  }
  return files;
}
