import type { IncomingMessage, ServerResponse } from 'node:http';
import { type AdminContext, handleAdmin, LOCKS_PATH } from './admin-api.js';
import { type Dashboard, serveDashboard } from './dashboard.js';
import { sendError, sendJson, sendThrown } from './http-json.js';
import type { ServerMetrics } from './metrics.js';

export interface HttpContext extends AdminContext {
  metrics: ServerMetrics;
  dashboard: Dashboard;
  health(): Record<string, unknown>;
}

/**
 * Everything on the server's port that is not the WebSocket: `/healthz`, `/metrics`, the admin
 * API under `/v1/locks` and the dashboard at `/`.
 */
export function createHttpHandler(context: HttpContext) {
  return (request: IncomingMessage, response: ServerResponse): void => {
    const url = request.url ?? '/';
    const queryAt = url.indexOf('?');
    // The raw path: percent-encoded lock names must reach the admin API undecoded.
    const path = queryAt < 0 ? url : url.slice(0, queryAt);
    const get = request.method === 'GET' || request.method === 'HEAD';

    if (path === '/healthz' && get) {
      sendJson(response, 200, context.health());
      return;
    }
    if (path === '/metrics' && get) {
      context.metrics.render().then(
        (text) => {
          response.writeHead(200, { 'content-type': context.metrics.contentType });
          response.end(text);
        },
        (error: unknown) => sendThrown(response, error),
      );
      return;
    }
    if (path === LOCKS_PATH || path.startsWith(`${LOCKS_PATH}/`)) {
      const query = new URLSearchParams(queryAt < 0 ? '' : url.slice(queryAt + 1));
      void handleAdmin(context, request, response, path, query);
      return;
    }
    if (serveDashboard(context.dashboard, request.method, path, response)) return;
    sendError(response, 404, 'NOT_FOUND', `no route for ${request.method} ${path}`);
  };
}
