import type { IncomingMessage, ServerResponse } from 'node:http';
import { DlmError, formatToken, isDlmError, type LockService } from '@dlm/core';
import { heldState, lockView } from './held-state.js';
import { sendError, sendJson, sendThrown } from './http-json.js';
import type { ListLocks } from './lock-observer.js';
import type { Logger } from './logger.js';
import { allows, allowsPrefix, type Principal } from './permissions.js';
import { validatePrefix } from './prefix.js';

export interface AdminContext {
  service: LockService;
  /** The backend's listing, bounded and observed; undefined when the backend cannot list. */
  list: ListLocks | undefined;
  logger: Logger;
}

export const LOCKS_PATH = '/v1/locks';

/**
 * The admin HTTP API:
 * - `GET /v1/locks?prefix=P` lists held locks (needs a backend that can list: 501 otherwise);
 * - `GET /v1/locks/{name}` reports one lock;
 * - `DELETE /v1/locks/{name}` revokes it: its holder is told `lock.lost` (revoked) and the next
 *   waiter is granted with a higher token. Every revocation writes an audit log line.
 * `{name}` is URL-encoded (`encodeURIComponent`), so names may contain `/`. Every route needs a
 * principal with `admin` on the names it touches.
 */
export async function handleAdmin(
  context: AdminContext,
  principal: Principal,
  request: IncomingMessage,
  response: ServerResponse,
  path: string,
  query: URLSearchParams,
): Promise<void> {
  try {
    if (path === LOCKS_PATH || path === `${LOCKS_PATH}/`) {
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        methodNotAllowed(response, request.method, 'GET');
        return;
      }
      await listLocks(context, principal, response, query);
      return;
    }
    const name = decodeName(path.slice(LOCKS_PATH.length + 1), context);
    if (!allows(principal, 'admin', name)) throw forbidden(principal, JSON.stringify(name));
    if (request.method === 'GET' || request.method === 'HEAD') {
      await getLock(context, response, name);
    } else if (request.method === 'DELETE') {
      await revokeLock(context, principal, request, response, name);
    } else {
      methodNotAllowed(response, request.method, 'GET, DELETE');
    }
  } catch (error) {
    if (!isDlmError(error)) {
      context.logger.error('admin request failed with an internal error', {
        method: request.method,
        path,
        error: error instanceof Error ? error.message : String(error),
      });
    }
    sendThrown(response, error);
  }
}

function forbidden(principal: Principal, what: string): DlmError {
  return new DlmError(
    'FORBIDDEN',
    `token ${JSON.stringify(principal.name)} may not administer ${what}`,
  );
}

function methodNotAllowed(response: ServerResponse, method: string | undefined, allow: string) {
  sendError(
    response,
    405,
    'METHOD_NOT_FOUND',
    `${method} is not allowed here (allowed: ${allow})`,
    {},
    { allow },
  );
}

function decodeName(encoded: string, context: AdminContext): string {
  let name: string;
  try {
    name = decodeURIComponent(encoded);
  } catch {
    throw new DlmError('INVALID_PARAMS', 'name is not validly URL-encoded', { field: 'name' });
  }
  return context.service.checkName(name);
}

async function listLocks(
  context: AdminContext,
  principal: Principal,
  response: ServerResponse,
  query: URLSearchParams,
) {
  const { list, service } = context;
  const prefix = validatePrefix(query.get('prefix') ?? '', service.limits);
  if (!allowsPrefix(principal, 'admin', prefix))
    throw forbidden(principal, `the prefix ${JSON.stringify(prefix)}`);
  if (!list) {
    sendError(
      response,
      501,
      'METHOD_NOT_FOUND',
      `the ${service.backend.kind} backend cannot list its locks; ask for one lock with GET ${LOCKS_PATH}/{name}`,
    );
    return;
  }
  const states = await list(prefix);
  const locks = states
    .map((state) => {
      const { held: _held, ...lock } = heldState(state);
      return Object.assign({}, lock, {
        waiters: service.waiters(state.name),
        waitersScope: 'server',
      });
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  sendJson(response, 200, { locks });
}

async function getLock(context: AdminContext, response: ServerResponse, name: string) {
  sendJson(response, 200, await lockView(context.service, name));
}

async function revokeLock(
  context: AdminContext,
  principal: Principal,
  request: IncomingMessage,
  response: ServerResponse,
  name: string,
) {
  const revoked = await context.service.revoke(name);
  if (!revoked) {
    sendError(response, 404, 'NOT_FOUND', `lock ${JSON.stringify(name)} is not held`);
    return;
  }
  const token = formatToken(revoked.token);
  // The audit line is a warning so that it is kept at every log level short of silent.
  context.logger.warn('lock revoked', {
    audit: true,
    name,
    owner: revoked.owner,
    token,
    by: principal.name,
    remoteAddress: request.socket.remoteAddress,
    userAgent: request.headers['user-agent'],
  });
  sendJson(response, 200, { revoked: true, name, owner: revoked.owner, token });
}
