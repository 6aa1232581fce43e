import type { IncomingMessage, ServerResponse } from 'node:http';
import { MAX_PAYLOAD_BYTES } from '@dlm/protocol';
import {
  DaprError,
  type DaprLockRequest,
  type DaprLocks,
  type DaprOptions,
  GRPC,
  type TryLockRequest,
} from './dapr-locks.js';
import type { DoorContext } from './door.js';
import { readBody } from './http-body.js';
import { callerOf, isRefusal } from './http-caller.js';
import { sendJson } from './http-json.js';
import type { Principal } from './permissions.js';

/** The header a Dapr client sends its API token in (HTTP header and gRPC metadata alike). */
export const DAPR_TOKEN_HEADER = 'dapr-api-token';
/** The header (HTTP) or trailer (gRPC) with the fencing token of a successful TryLock. */
export const FENCING_TOKEN_HEADER = 'dlm-fencing-token';

const LOCK_PATH = /^\/v1\.0-alpha1\/(lock|unlock)\/([^/]+)\/?$/;
const METADATA_PATH = '/v1.0/metadata';
const HEALTH_PATHS: ReadonlySet<string> = new Set(['/v1.0/healthz', '/v1.0/healthz/outbound']);

/** What Dapr's `GET /v1.0/metadata` (and gRPC `GetMetadata`) says: the stores, as lock components. */
export function daprMetadata(options: DaprOptions, serverVersion: string) {
  return {
    id: 'dlm',
    runtimeVersion: `dlm-${serverVersion}`,
    components: Object.keys(options.stores).map((name) => ({
      name,
      type: 'lock.dlm',
      version: 'v1',
      capabilities: [] as string[],
    })),
  };
}

function sendDaprError(response: ServerResponse, error: DaprError): void {
  sendJson(response, error.httpStatus, { errorCode: error.errorCode, message: error.message });
}

/**
 * A proto3 field as protojson reads it: by its JSON name or its proto name, `null` or absent
 * as the default, and the wrong type refused (Dapr: ERR_MALFORMED_REQUEST).
 */
function field(body: Record<string, unknown>, json: string, proto: string): unknown {
  const value = Object.hasOwn(body, json) ? body[json] : body[proto];
  return value === null ? undefined : value;
}

function stringField(body: Record<string, unknown>, json: string, proto: string): string {
  const value = field(body, json, proto);
  if (value === undefined) return '';
  if (typeof value !== 'string') throw bodyError(`${json}: want a string, got ${typeof value}`);
  return value;
}

/** An int32 as protojson takes it: a JSON integer, or a decimal string of one. */
function int32Field(body: Record<string, unknown>, json: string, proto: string): number {
  const value = field(body, json, proto);
  if (value === undefined) return 0;
  const number = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof number !== 'number' || !Number.isInteger(number) || Math.abs(number) > 2 ** 31 - 1) {
    throw bodyError(`${json}: want a 32-bit integer, got ${JSON.stringify(value)?.slice(0, 40)}`);
  }
  return number;
}

const bodyError = (detail: string) =>
  new DaprError(
    'ERR_MALFORMED_REQUEST',
    `failed deserializing HTTP body: ${detail}`,
    400,
    GRPC.INVALID_ARGUMENT,
  );

/** The request's JSON body, as Dapr reads a TryLock or Unlock: store name from the path. */
function lockRequestOf(text: string, storeName: string, withExpiry: boolean): TryLockRequest {
  let body: unknown = {};
  if (text.length > 0) {
    try {
      body = JSON.parse(text);
    } catch {
      throw bodyError('not valid JSON');
    }
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw bodyError('want a JSON object');
  }
  const fields = body as Record<string, unknown>;
  return {
    storeName,
    resourceId: stringField(fields, 'resourceId', 'resource_id'),
    lockOwner: stringField(fields, 'lockOwner', 'lock_owner'),
    expiryInSeconds: withExpiry ? int32Field(fields, 'expiryInSeconds', 'expiry_in_seconds') : 0,
  };
}

/** Dapr's answer to a request without the token it needs: 401, `invalid api token`. */
function refuseCaller(response: ServerResponse, status: 401 | 403): void {
  if (status === 403) {
    sendDaprError(
      response,
      new DaprError(
        'ERR_PERMISSION_DENIED',
        'this origin is not allowed',
        403,
        GRPC.PERMISSION_DENIED,
      ),
    );
    return;
  }
  response.writeHead(401, { 'content-type': 'text/plain; charset=utf-8' });
  response.end('invalid api token\n');
}

async function serveLock(
  locks: DaprLocks,
  principal: Principal,
  request: IncomingMessage,
  response: ServerResponse,
  call: { unlock: boolean; storeName: string },
): Promise<void> {
  const text = await readBody(request, MAX_PAYLOAD_BYTES);
  if (text === 'aborted') return;
  if (text === 'too-large') {
    response.setHeader('connection', 'close');
    sendDaprError(
      response,
      new DaprError(
        'ERR_BODY_READ',
        `failed to read request body: over ${MAX_PAYLOAD_BYTES} bytes`,
        413,
        GRPC.RESOURCE_EXHAUSTED,
      ),
    );
    return;
  }
  try {
    const parsed = lockRequestOf(text, call.storeName, !call.unlock);
    if (call.unlock) {
      const status = await locks.unlock(principal, parsed as DaprLockRequest);
      sendJson(response, 200, { status });
      return;
    }
    const outcome = await locks.tryLock(principal, parsed);
    sendJson(
      response,
      200,
      { success: outcome.success },
      outcome.success ? { [FENCING_TOKEN_HEADER]: outcome.token } : {},
    );
  } catch (error) {
    if (response.headersSent) return;
    sendDaprError(
      response,
      error instanceof DaprError
        ? error
        : new DaprError('ERR_INTERNAL', 'internal error', 500, GRPC.INTERNAL),
    );
  }
}

function decodeStore(encoded: string): string | null {
  try {
    return decodeURIComponent(encoded);
  } catch {
    return null;
  }
}

/**
 * Dapr's lock API over HTTP, wire-compatible with Dapr's v1.0-alpha1:
 * `POST /v1.0-alpha1/lock/{store}`, `POST /v1.0-alpha1/unlock/{store}`, `GET /v1.0/metadata`
 * (what the SDKs ask before they call) and `GET /v1.0/healthz`. Credentials: Dapr's
 * `dapr-api-token` header, checked as a dlm bearer token (its prefixes and actions apply).
 */
export function createDaprHttpDoor(
  context: DoorContext,
  options: DaprOptions,
  locks: DaprLocks,
  ready: () => boolean,
) {
  return (request: IncomingMessage, response: ServerResponse, path: string): boolean => {
    const get = request.method === 'GET' || request.method === 'HEAD';
    if (HEALTH_PATHS.has(path) && get) {
      // Open to all, as in Dapr: 204 while the backend answers.
      response.writeHead(ready() ? 204 : 500).end();
      return true;
    }
    const match = LOCK_PATH.exec(path);
    if (!(match && request.method === 'POST') && !(path === METADATA_PATH && get)) return false;
    const token = request.headers[DAPR_TOKEN_HEADER];
    const caller = callerOf(context, request, typeof token === 'string' ? token : undefined);
    if (isRefusal(caller)) {
      refuseCaller(response, caller.status);
      return true;
    }
    if (!match) {
      sendJson(response, 200, daprMetadata(options, context.serverVersion));
      return true;
    }
    const storeName = decodeStore(match[2]!);
    if (storeName === null) {
      sendDaprError(response, bodyError('the store name is not validly URL-encoded'));
      return true;
    }
    const admitted = context.addresses.admit(request.socket.remoteAddress ?? 'unknown');
    if (!(typeof admitted === 'function')) {
      response.setHeader('retry-after', '1');
      sendDaprError(
        response,
        new DaprError('ERR_TOO_MANY_REQUESTS', admitted.message, 429, GRPC.RESOURCE_EXHAUSTED),
      );
      return true;
    }
    context.answering.track(response);
    void serveLock(locks, caller, request, response, { unlock: match[1] === 'unlock', storeName })
      .catch((error: unknown) => {
        context.logger.error('Dapr request failed', { error: String(error) });
      })
      .finally(admitted);
    return true;
  };
}
