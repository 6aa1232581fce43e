import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { DlmError, formatToken, type Limits } from '@dlm/core';
import { HISTORY_MAX_AGE_MS, HISTORY_MAX_EVENTS } from './feed-history.js';
import { sendJson, sendThrown } from './http-json.js';
import type { LockFeed } from './lock-feed.js';
import { allowsPrefix, type Principal } from './permissions.js';
import { validatePrefix } from './prefix.js';

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
  '/charts.js': ['charts.js', 'text/javascript; charset=utf-8'],
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

export const FEED_PATH = '/v1/feed';

/**
 * `GET /v1/feed?prefix=P&after=SEQ`: the lock feed's recent past under a prefix, for the
 * dashboard's charts and its live feed across page loads. `after` is the last `seq` the reader
 * saw (0, or absent, for the whole ring; a server that restarted answers with its whole ring).
 * Times are ages (`ageMs`: how long ago), so that the reader needs no clock of ours. Needs
 * `watch` on the prefix, as `lock.watchPrefix` does.
 */
export function serveFeed(
  feed: LockFeed,
  limits: Limits,
  principal: Principal,
  query: URLSearchParams,
  response: ServerResponse,
): void {
  try {
    const prefix = validatePrefix(query.get('prefix') ?? '', limits);
    if (!allowsPrefix(principal, 'watch', prefix)) {
      throw new DlmError(
        'FORBIDDEN',
        `token ${JSON.stringify(principal.name)} may not watch the prefix ${JSON.stringify(prefix)}`,
      );
    }
    const after = afterOf(query.get('after'));
    const { history } = feed;
    sendJson(response, 200, {
      seq: history.seq,
      maxEvents: HISTORY_MAX_EVENTS,
      maxAgeMs: HISTORY_MAX_AGE_MS,
      events: history.since(after, prefix).map(({ seq, at, token, ...event }) => ({
        seq,
        ageMs: history.ageMs(at),
        ...event,
        ...(token === undefined ? {} : { token: formatToken(token) }),
      })),
      rates: history.rates(prefix),
      locks: locksOf(feed, prefix),
    });
  } catch (error) {
    sendThrown(response, error);
  }
}

function afterOf(value: string | null): number {
  if (value === null || value === '') return 0;
  const after = Number(value);
  if (!Number.isSafeInteger(after) || after < 0) {
    throw new DlmError(
      'INVALID_PARAMS',
      `after must be the seq of the last event read: a whole number ≥ 0, not ${JSON.stringify(value)}`,
      { field: 'after' },
    );
  }
  return after;
}

interface LockActivity {
  name: string;
  token?: string;
  heldMs?: number;
  waitingMs: number[];
}

/** Per name under `prefix`: how long its lease has been held, and how long each waiter waits. */
function locksOf(feed: LockFeed, prefix: string): LockActivity[] {
  const locks = new Map<string, LockActivity>();
  for (const lock of feed.snapshot(prefix)) {
    const { name, heldMs } = lock;
    locks.set(name, { name, token: formatToken(lock.token), heldMs, waitingMs: [] });
  }
  for (const name of feed.history.waitingNames()) {
    if (!name.startsWith(prefix)) continue;
    const lock = locks.get(name) ?? { name, waitingMs: [] };
    lock.waitingMs = feed.history.waitingMs(name);
    locks.set(name, lock);
  }
  return [...locks.values()];
}
