import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';

/** A file of the dashboard, read once at start-up. */
interface StaticFile {
  body: Buffer;
  type: string;
}

// `static/` sits next to `src/` and `dist/`, so this resolves from both.
const STATIC_DIR = new URL('../static/', import.meta.url);

const ROUTES: Record<string, [file: string, type: string]> = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/index.html': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard.js': ['dashboard.js', 'text/javascript; charset=utf-8'],
  '/dashboard.css': ['dashboard.css', 'text/css; charset=utf-8'],
  '/favicon.svg': ['favicon.svg', 'image/svg+xml'],
};

// The page loads only its own script and style and talks only to this server (fetch and the
// WebSocket): nothing inline, nothing from elsewhere.
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export type Dashboard = ReadonlyMap<string, StaticFile>;

/** Reads the dashboard's files. A missing file leaves its route out (404), not a crash. */
export function loadDashboard(): Dashboard {
  const files = new Map<string, StaticFile>();
  for (const [route, [file, type]] of Object.entries(ROUTES)) {
    try {
      files.set(route, { body: readFileSync(new URL(file, STATIC_DIR)), type });
    } catch {}
  }
  return files;
}

/** Serves a dashboard file for GET/HEAD `path`; false when `path` is not one. */
export function serveDashboard(
  dashboard: Dashboard,
  method: string | undefined,
  path: string,
  response: ServerResponse,
): boolean {
  if (method !== 'GET' && method !== 'HEAD') return false;
  const file = dashboard.get(path);
  if (!file) return false;
  response.writeHead(200, {
    'content-type': file.type,
    'content-length': file.body.length,
    'cache-control': 'no-cache',
    ...SECURITY_HEADERS,
  });
  response.end(method === 'HEAD' ? undefined : file.body);
  return true;
}
