import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  createLockService,
  type LockBackend,
  type LockServiceOptions,
  systemClock,
} from '@dlm/core';
import { MAX_PAYLOAD_BYTES, SUBPROTOCOL, WS_PATH } from '@dlm/protocol';
import { type WebSocket, WebSocketServer } from 'ws';
import type { BackendConfig } from './config.js';
import { createBackend, describeBackend } from './create-backend.js';
import { loadDashboard } from './dashboard.js';
import { createHttpHandler } from './http-handler.js';
import { instrumentBackend } from './instrumented-backend.js';
import { createLockFeed } from './lock-feed.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics } from './metrics.js';
import { observeService } from './observed-service.js';
import { createSession, type Session } from './session.js';

export interface ServerOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** A backend the caller owns (the server will not close it). */
  backend?: LockBackend;
  /** Or the backend to open (and close on shutdown). Default: embedded, in memory. */
  backendConfig?: BackendConfig;
  logger?: Logger;
  /** Requests one connection may have in flight, waits included. */
  maxInflight?: number;
  /** Passed to the lock service (limits, clock, timeouts). */
  service?: Omit<LockServiceOptions, 'backend'>;
}

export interface RunningServer {
  readonly host: string;
  readonly port: number;
  /** `ws://host:port/v1/ws` */
  readonly url: string;
  /** `http://host:port`: the dashboard, `/metrics`, `/healthz` and the admin API. */
  readonly httpUrl: string;
  readonly backend: LockBackend;
  /**
   * Graceful shutdown: stop accepting, end pending waits with CANCELLED, close connections,
   * and close the backend if the server opened it (flushing the embedded journal).
   */
  close(): Promise<void>;
}

const VERSION: string = (() => {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    return pkg.version;
  } catch {
    return '0.0.0';
  }
})();

function refuse(socket: Duplex, status: string, reason: string): void {
  socket.end(
    `HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(reason)}\r\n\r\n${reason}`,
  );
}

/**
 * Starts a dlm server speaking protocol v1 over WebSocket at `/v1/ws`, with `GET /healthz`,
 * Prometheus metrics at `GET /metrics`, the admin API under `/v1/locks` and the dashboard at `/`.
 *
 * @example
 * const server = await startServer({ port: 0 });
 * console.log(server.url); // ws://127.0.0.1:54321/v1/ws
 * await server.close();
 */
export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  const logger = options.logger ?? createLogger('silent');
  const host = options.host ?? '127.0.0.1';
  const backendConfig: BackendConfig = options.backendConfig ?? { kind: 'embedded', dataDir: null };
  const ownsBackend = options.backend === undefined;
  const rawBackend = options.backend ?? (await createBackend(backendConfig, logger));
  logger.info(
    ownsBackend ? 'backend connected' : 'backend attached',
    ownsBackend ? describeBackend(backendConfig) : { backend: rawBackend.kind },
  );
  const clock = options.service?.clock ?? systemClock;
  const backendTimeoutMs = options.service?.backendTimeoutMs ?? 10_000;
  const maxInflight = options.maxInflight ?? 256;
  const sessions = new Map<WebSocket, Session>();

  // Gauges read these at scrape time; they are all assigned before the server listens.
  const metrics = createMetrics({
    version: VERSION,
    backend: rawBackend.kind,
    gauges: {
      sessions: () => sessions.size,
      heldLocks: () => feed.localHeld,
      waiters: () => service.totalWaiters(),
    },
  });
  const backend = instrumentBackend(rawBackend, metrics, logger);
  const core = createLockService({ ...options.service, backend });
  const feed = createLockFeed({
    backend,
    clock,
    backendTimeoutMs,
    waiters: (name) => core.waiters(name),
    onHoldEnded: (end, seconds) => metrics.hold(end, seconds),
  });
  const service = observeService(core, feed, metrics, logger);

  const http = createServer(
    createHttpHandler({
      service,
      backend,
      clock,
      backendTimeoutMs,
      logger,
      metrics,
      dashboard: loadDashboard(),
      health: () => ({ status: 'ok', backend: backend.kind, sessions: sessions.size }),
    }),
  );

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_PAYLOAD_BYTES,
    perMessageDeflate: false,
    handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
  });

  http.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => {});
    const path = (request.url ?? '/').split('?')[0];
    if (path !== WS_PATH) {
      refuse(socket, '404 Not Found', `the WebSocket endpoint is ${WS_PATH}`);
      return;
    }
    const offered = request.headers['sec-websocket-protocol'];
    if (offered !== undefined && !offered.split(',').some((p) => p.trim() === SUBPROTOCOL)) {
      refuse(socket, '400 Bad Request', `unsupported subprotocol: offer ${SUBPROTOCOL}`);
      return;
    }
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws));
  });

  function accept(ws: WebSocket): void {
    const session = createSession({
      service,
      limits: { maxPayloadBytes: MAX_PAYLOAD_BYTES, maxInflight },
      serverVersion: VERSION,
      logger,
      feed,
      metrics,
      send: (text) => {
        if (ws.readyState !== ws.OPEN) return false;
        ws.send(text);
        return true;
      },
    });
    sessions.set(ws, session);
    logger.info('session opened', { session: session.id });
    ws.on('message', (data, isBinary) => {
      session.handleFrame(isBinary ? null : data.toString());
    });
    // ws closes an oversize frame's connection with 1009 itself; the error is expected.
    ws.on('error', (error) =>
      logger.debug('connection error', { session: session.id, error: error.message }),
    );
    ws.on('close', (code) => {
      sessions.delete(ws);
      session.close();
      logger.info('session closed', { session: session.id, code });
    });
  }

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 7070, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const port = (http.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  logger.info('listening', {
    url: `ws://${urlHost}:${port}${WS_PATH}`,
    ...describeBackend(backendConfig),
  });

  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    url: `ws://${urlHost}:${port}${WS_PATH}`,
    httpUrl: `http://${urlHost}:${port}`,
    backend: rawBackend,
    close() {
      closing ??= (async () => {
        http.close();
        // Pending waits answer CANCELLED before their connections close.
        await service.close();
        feed.close();
        await new Promise((resolve) => setImmediate(resolve));
        for (const ws of sessions.keys()) ws.close(1001, 'server shutting down');
        const deadline = Date.now() + 2_000;
        while (sessions.size && Date.now() < deadline)
          await new Promise((resolve) => setTimeout(resolve, 10));
        for (const ws of sessions.keys()) ws.terminate();
        http.closeAllConnections();
        if (ownsBackend) {
          await rawBackend.close();
          logger.info('backend closed', { backend: rawBackend.kind });
        }
        logger.info('stopped');
      })();
      return closing;
    },
  };
}
