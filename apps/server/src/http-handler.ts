import type { IncomingMessage, ServerResponse } from 'node:http';
import { type AdminContext, handleAdmin, LOCKS_PATH } from './admin-api.js';
import type { Authenticator } from './auth.js';
import type { Readiness } from './backend-health.js';
import { type Dashboard, FEED_PATH, serveDashboard, serveFeed } from './dashboard.js';
import { bearerCaller, isRefusal } from './http-caller.js';
import { sendError, sendJson, sendThrown } from './http-json.js';
import type { LockFeed } from './lock-feed.js';
import type { ServerMetrics } from './metrics.js';
import type { OriginPolicy } from './origin-policy.js';
import type { Principal } from './permissions.js';

export interface HttpContext extends AdminContext {
  metrics: ServerMetrics;
  dashboard: Dashboard;
  /** The lock feed, whose recent past `GET /v1/feed` tells. */
  feed: LockFeed;
  authenticator: Authenticator;
  origins: OriginPolicy;
  /** Whether the backend answers, with what `/readyz` adds to it (backend kind, sessions). */
  readiness(): Readiness & Record<string, unknown>;
  /** More routes (the HTTP doors), tried before the dashboard: each says whether it answered. */
  doors?: ReadonlyArray<HttpDoor>;
}

/** A route of its own: answers the request and returns true, or returns false to pass it on. */
export type HttpDoor = (
  request: IncomingMessage,
  response: ServerResponse,
  path: string,
) => boolean;

/**
 * Whom the request's bearer token stands for (everyone is ANONYMOUS without tokens), or null
 * after answering 401 (no valid token) or 403 (a browser page from an origin not allowed).
 */
function authenticate(
  context: HttpContext,
  request: IncomingMessage,
  response: ServerResponse,
): Principal | null {
  const caller = bearerCaller(context, request);
  if (!isRefusal(caller)) return caller;
  sendError(response, caller.status, caller.code, caller.message, {}, caller.headers);
  return null;
}

/**
 * Everything on the server's port that is not the WebSocket: `/livez`, `/readyz`, `/healthz` and
 * the dashboard's files
 * (open to all), `/metrics` (any valid token), the feed's recent past at `/v1/feed` (a token with
 * `watch` on the prefix) and the admin API under `/v1/locks` (a token with `admin` for the names
 * concerned).
 */
export function createHttpHandler(context: HttpContext) {
  return (request: IncomingMessage, response: ServerResponse): void => {
    const url = request.url ?? '/';
    const queryAt = url.indexOf('?');
    // The raw path: percent-encoded lock names must reach the admin API undecoded.
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    const get = request.method === 'GET' || request.method === 'HEAD';

    // Liveness: the process serves HTTP, whatever its backend does. Restarting a server
    // because its backend is down would not bring the backend back.
    if (path === '/livez' && get) {
      sendJson(response, 200, { status: 'ok' });
      return;
    }
    // Readiness: route clients here only while the backend answers. /healthz is the same, so
    // that a balancer configured with it does not keep sending clients to a server whose
    // every acquire fails.
    if ((path === '/readyz' || path === '/healthz') && get) {
      const { ready, ...rest } = context.readiness();
      sendJson(response, ready ? 200 : 503, { status: ready ? 'ok' : 'unavailable', ...rest });
      return;
    }
    if (path === '/metrics' && get) {
      if (!authenticate(context, request, response)) return;
      context.metrics.render().then(
        (text) => {
          response.writeHead(200, { 'content-type': context.metrics.contentType });
          response.end(text);
        },
        (error: unknown) => sendThrown(response, error),
      );
      return;
    }
    if (path === FEED_PATH && get) {
      const principal = authenticate(context, request, response);
      if (!principal) return;
      const query = new URLSearchParams(queryAt < 0 ? '' : url.slice(queryAt + 1));
      serveFeed(context.feed, context.service.limits, principal, query, response);
      return;
    }
    if (path === LOCKS_PATH || path.startsWith(`${LOCKS_PATH}/`)) {
      const principal = authenticate(context, request, response);
      if (!principal) return;
      const query = new URLSearchParams(queryAt < 0 ? '' : url.slice(queryAt + 1));
      void handleAdmin(context, principal, request, response, path, query);
      return;
    }
    for (const door of context.doors ?? []) if (door(request, response, path)) return;
    if (serveDashboard(context.dashboard, request.method, path, response)) return;
    sendError(response, 404, 'NOT_FOUND', `no route for ${request.method} ${path}`);
  };
}
