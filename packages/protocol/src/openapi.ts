import { ERROR_CODES } from '@dlm/core';
import { MAX_PAYLOAD_BYTES, OPENAPI_PATH, PROTOCOL, RPC_PATH } from './constants.js';
import { ErrorFrame, requestFrame, resultFrame } from './frames.js';
import { httpMethods } from './http.js';
import type { MethodName } from './schemas.js';
import { jsonCopy, summary } from './summaries.js';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** A response whose body is one JSON-RPC error object (`error`), for a refusal before serving. */
function refusal(description: string, headers?: Record<string, unknown>) {
  return {
    description,
    ...(headers ? { headers } : {}),
    content: { 'application/json': { schema: ref('error') } },
  };
}

/** The request and result frames of every method the HTTP door serves, and the error frame. */
function frameSchemas(methods: readonly MethodName[]): Record<string, unknown> {
  const schemas: Record<string, unknown> = {};
  for (const method of methods) {
    schemas[`${method}.request`] = jsonCopy(requestFrame(method));
    schemas[`${method}.result`] = jsonCopy(resultFrame(method));
  }
  schemas.error = {
    ...jsonCopy(ErrorFrame),
    // The stable error names (error.data.code), their JSON-RPC numbers and retryability.
    'x-error-codes': Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, { rpc, retryable }]) => [code, { rpc, retryable }]),
    ),
  };
  return schemas;
}

function rpcOperation(methods: readonly MethodName[]) {
  return {
    operationId: 'rpc',
    summary: 'Call one lock method (a JSON-RPC 2.0 request) and get its reply.',
    description:
      `The body is one JSON-RPC 2.0 request of protocol ${PROTOCOL}, as one WebSocket frame ` +
      'would carry it; the reply is the one the WebSocket would send, with HTTP 200, errors ' +
      'included (match on `error.data.code`). Methods:\n\n' +
      methods.map((method) => `- \`${method}\`: ${summary(method)}`).join('\n') +
      "\n\nThere is no session: `lock.release` and `lock.extend` need the lease's `leaseKey` " +
      '(the grant returned it), else NOT_HOLDER. An acquire with `waitMs` holds the request ' +
      'open until it is granted or the wait ends; closing the connection cancels the wait. ' +
      '`session.*` and watches are WebSocket-only (METHOD_NOT_FOUND). A batch (an array) is ' +
      'INVALID_REQUEST, as on the WebSocket. See SPEC.md in @dlm/protocol.',
    security: [{ bearer: [] }, {}],
    requestBody: {
      required: true,
      content: {
        'application/json': {
          schema: {
            oneOf: methods.map((method) => ref(`${method}.request`)),
            discriminator: {
              propertyName: 'method',
              mapping: Object.fromEntries(
                methods.map((method) => [method, `#/components/schemas/${method}.request`]),
              ),
            },
          },
        },
      },
    },
    responses: {
      '200': {
        description:
          "The JSON-RPC reply: the method's result, or an error (LOCK_HELD, NOT_HOLDER, INVALID_PARAMS, …).",
        content: {
          'application/json': {
            schema: { oneOf: [...methods.map((method) => ref(`${method}.result`)), ref('error')] },
          },
        },
      },
      '401': refusal(
        'UNAUTHENTICATED: the server has tokens and the request has no valid `Authorization: Bearer` one.',
        { 'WWW-Authenticate': { schema: { type: 'string', const: 'Bearer realm="dlm"' } } },
      ),
      '403': refusal('FORBIDDEN: a browser `Origin` the server does not allow.'),
      '405': refusal('METHOD_NOT_FOUND: another HTTP method than POST.', {
        Allow: { schema: { type: 'string', const: 'POST' } },
      }),
      '413': refusal(`INVALID_REQUEST: a body over ${MAX_PAYLOAD_BYTES} bytes.`),
      '415': refusal('INVALID_REQUEST: a `Content-Type` other than `application/json`.'),
      '429': refusal(
        'LIMIT_EXCEEDED: too many requests in flight from this address, or faster than its rate.',
        { 'Retry-After': { schema: { type: 'integer' } } },
      ),
    },
  };
}

/**
 * The HTTP door as an OpenAPI 3.1 document: `POST /v1/rpc`, its request and reply frames
 * composed from the same TypeBox schemas as the TypeScript types, the JSON Schema and the
 * AsyncAPI document. Published as `@dlm/protocol/openapi.json` (checked in) and served by
 * dlm servers at `/v1/openapi.json`.
 */
export function protocolOpenApi(): Record<string, unknown> {
  const methods = httpMethods();
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'dlm lock server: HTTP door',
      version: '1.0.0',
      summary: `The lock methods of protocol ${PROTOCOL} over plain HTTP.`,
      description:
        'Any HTTP client can take, extend and release a lock: one JSON-RPC 2.0 request per ' +
        `POST to \`${RPC_PATH}\`, the same methods, errors, tokens, permissions and limits as ` +
        'the WebSocket protocol (SPEC.md in @dlm/protocol).',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [
      {
        url: 'http://localhost:7070',
        description: 'A dlm server on its default port (https with TLS).',
      },
    ],
    paths: {
      [RPC_PATH]: { post: rpcOperation(methods) },
      [OPENAPI_PATH]: {
        get: {
          operationId: 'openapi',
          summary: 'This document.',
          responses: {
            '200': {
              description: 'The OpenAPI document of the HTTP door.',
              content: { 'application/json': { schema: { type: 'object' } } },
            },
          },
        },
      },
    },
    components: {
      schemas: frameSchemas(methods),
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A token of the server (the same tokens, actions and prefixes as the WebSocket). Not needed on a server without tokens.',
        },
      },
    },
  };
}
