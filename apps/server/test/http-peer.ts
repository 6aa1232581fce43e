import { request as httpRequest } from 'node:http';
import { frameProblem, resultProblem } from './frame-schema.js';

/** What `POST /v1/rpc` answered: the HTTP status, its headers and the JSON-RPC reply. */
export interface HttpReply {
  status: number;
  headers: Headers;
  body: Record<string, any>;
}

let seq = 0;

/**
 * Posts one JSON-RPC request (or `raw` text) to `httpUrl`'s `/v1/rpc` and returns the reply,
 * checked against the protocol's schema as every WebSocket frame in these tests is.
 */
export async function rpc(
  httpUrl: string,
  method: string,
  params: unknown = {},
  options: { headers?: Record<string, string>; raw?: string; signal?: AbortSignal } = {},
): Promise<HttpReply> {
  seq += 1;
  const response = await fetch(`${httpUrl}/v1/rpc`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...options.headers },
    body: options.raw ?? JSON.stringify({ jsonrpc: '2.0', id: seq, method, params }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const body = (await response.json()) as Record<string, any>;
  const problem =
    frameProblem(body) ?? (options.raw ? undefined : resultProblem(method, body.result));
  if (problem)
    throw new Error(`reply off the protocol schema (${problem}): ${JSON.stringify(body)}`);
  return { status: response.status, headers: response.headers, body };
}

/**
 * Starts a POST whose client goes away after `afterMs` (the socket destroyed, as a killed curl
 * would): resolves once it is gone, with what the server had answered by then (nothing, for a
 * wait that was still pending).
 */
export function abandonedRpc(
  httpUrl: string,
  method: string,
  params: unknown,
  afterMs: number,
): Promise<string> {
  return new Promise((resolve) => {
    const url = new URL(`${httpUrl}/v1/rpc`);
    let answered = '';
    const request = httpRequest(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST' },
      (response) => {
        response.on('data', (chunk) => {
          answered += chunk;
        });
      },
    );
    request.setHeader('content-type', 'application/json');
    request.on('error', () => {});
    request.on('close', () => resolve(answered));
    request.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }));
    setTimeout(() => request.destroy(), afterMs);
  });
}
