import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { DlmError, isDlmError } from '@dlm/core';
import {
  httpMethods,
  isHttpMethod,
  MAX_PAYLOAD_BYTES,
  OPENAPI_PATH,
  protocolOpenApi,
  RPC_PATH,
  type RpcRequestId,
  toRpcError,
  WS_PATH,
} from '@dlm/protocol';
import { abandonSignal, type DoorContext, deliverGrant, requestScope } from './door.js';
import { isJson, readBody } from './http-body.js';
import { bearerCaller, isRefusal } from './http-caller.js';
import { sendJson } from './http-json.js';
import { lockHandlers } from './lock-handlers.js';
import type { Principal } from './permissions.js';
import { recordRequest } from './request-metrics.js';
import { parseRequest, type RpcRequest } from './rpc.js';

function reply(
  response: ServerResponse,
  status: number,
  id: RpcRequestId | null,
  outcome: { result: unknown } | { error: unknown },
  headers: Record<string, string> = {},
): void {
  if (response.destroyed || response.headersSent) return;
  const body =
    'result' in outcome
      ? { jsonrpc: '2.0', id, result: outcome.result }
      : { jsonrpc: '2.0', id, error: toRpcError(outcome.error) };
  sendJson(response, status, body, headers);
}

function refuse(
  response: ServerResponse,
  status: number,
  error: DlmError,
  headers: Record<string, string> = {},
): void {
  reply(response, status, null, { error }, headers);
}

const ONLY_ON_WEBSOCKET = (method: string) =>
  new DlmError(
    'METHOD_NOT_FOUND',
    `${method} is served on the WebSocket only (${WS_PATH}): ${RPC_PATH} serves ${httpMethods().join(', ')}`,
  );

/** Whom the request speaks for, or null once refused (401 or 403, as a JSON-RPC error). */
function principalOf(
  context: DoorContext,
  request: IncomingMessage,
  response: ServerResponse,
): Principal | null {
  const caller = bearerCaller(context, request);
  if (!isRefusal(caller)) return caller;
  refuse(response, caller.status, new DlmError(caller.code, caller.message), caller.headers);
  return null;
}

/** Answers a body that is not one: too large (413, and the connection closes), or gone. */
function refuseBody(
  context: DoorContext,
  response: ServerResponse,
  problem: 'too-large' | 'aborted',
): void {
  context.metrics.request('invalid', 'INVALID_REQUEST');
  if (problem === 'aborted') return;
  refuse(
    response,
    413,
    new DlmError('INVALID_REQUEST', `the body is over ${MAX_PAYLOAD_BYTES} bytes`),
    { connection: 'close' },
  );
}

/** Serves one parsed request through the same handlers as a WebSocket session's. */
async function serve(
  context: DoorContext,
  principal: Principal,
  request: RpcRequest,
  response: ServerResponse,
): Promise<void> {
  const startedAt = performance.now();
  const handlers = lockHandlers(requestScope(context, principal));
  const method = request.method as keyof typeof handlers;
  const acquires = method === 'lock.acquire' || method === 'lock.acquireAll';
  const waits = acquires && typeof request.params.waitMs === 'number' && request.params.waitMs > 0;
  try {
    const result = await handlers[method](
      request.params,
      waits ? abandonSignal(response) : undefined,
    );
    const send = () => reply(response, 200, request.id, { result });
    if (acquires) {
      deliverGrant(response, result, send, (lease) => handlers['lock.release'](lease, undefined));
    } else send();
    recordRequest(context.metrics, request, 'OK', startedAt);
  } catch (error) {
    if (!isDlmError(error)) {
      context.logger.error('request failed with an internal error', {
        method: request.method,
        door: RPC_PATH,
        error: String(error),
      });
    }
    reply(response, 200, request.id, { error });
    const { data } = toRpcError(error);
    recordRequest(context.metrics, request, data.code, startedAt, data);
  }
}

/** After the gate: the body, then one JSON-RPC request served (or refused as the WebSocket would). */
async function handleRpc(
  context: DoorContext,
  principal: Principal,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  const body = await readBody(request, MAX_PAYLOAD_BYTES);
  if (body === 'too-large' || body === 'aborted') {
    refuseBody(context, response, body);
    return;
  }
  const parsed = parseRequest(body);
  if ('error' in parsed) {
    context.metrics.request('invalid', parsed.error.code);
    reply(response, 200, parsed.id, { error: parsed.error });
    return;
  }
  if (!isHttpMethod(parsed.method)) {
    context.metrics.request(parsed.method, 'METHOD_NOT_FOUND');
    reply(response, 200, parsed.id, { error: ONLY_ON_WEBSOCKET(parsed.method) });
    return;
  }
  await serve(context, principal, parsed, response);
}

/**
 * The HTTP door (`POST /v1/rpc`): one JSON-RPC request per request, answered as the WebSocket
 * answers it, by the same handlers; and `GET /v1/openapi.json`, its OpenAPI document. Returns
 * whether it took the request.
 */
export function createRpcDoor(context: DoorContext) {
  let openApi: string | undefined;
  return (request: IncomingMessage, response: ServerResponse, path: string): boolean => {
    if (path === OPENAPI_PATH && (request.method === 'GET' || request.method === 'HEAD')) {
      openApi ??= JSON.stringify(protocolOpenApi());
      response.writeHead(200, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(openApi),
      });
      response.end(request.method === 'HEAD' ? undefined : openApi);
      return true;
    }
    if (path !== RPC_PATH) return false;
    if (request.method !== 'POST') {
      refuse(
        response,
        405,
        new DlmError('METHOD_NOT_FOUND', `${request.method} is not allowed here: POST a request`),
        { allow: 'POST' },
      );
      return true;
    }
    const principal = principalOf(context, request, response);
    if (!principal) return true;
    if (!isJson(request)) {
      refuse(
        response,
        415,
        new DlmError('INVALID_REQUEST', 'send the request as Content-Type: application/json'),
      );
      return true;
    }
    const admitted = context.addresses.admit(request.socket.remoteAddress ?? 'unknown');
    if (admitted instanceof DlmError) {
      context.metrics.request('invalid', 'LIMIT_EXCEEDED');
      refuse(response, 429, admitted, { 'retry-after': '1' });
      return true;
    }
    context.answering.track(response);
    handleRpc(context, principal, request, response)
      .catch((error: unknown) => {
        context.logger.error('HTTP request failed', { door: RPC_PATH, error: String(error) });
        reply(response, 500, null, { error });
      })
      .finally(admitted);
    return true;
  };
}
