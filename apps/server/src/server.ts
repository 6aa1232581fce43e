import { readFileSync } from 'node:fs';
import { createServer, type ServerOptions as HttpOptions, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import {
  corkUntil,
  createLockService,
  type LockBackend,
  type LockServiceOptions,
  systemClock,
} from '@dlm/core';
import { MAX_PAYLOAD_BYTES, SUBPROTOCOL, WS_PATH } from '@dlm/protocol';
import { type WebSocket, WebSocketServer } from 'ws';
import { bearerToken, createAuthenticator, type TokenGrant } from './auth.js';
import { createBackendHealth, type HealthOptions } from './backend-health.js';
import { CLOSE } from './close-codes.js';
import type { BackendConfig } from './config.js';
import { createBackend, describeBackend } from './create-backend.js';
import { loadDashboard } from './dashboard.js';
import { createHttpHandler } from './http-handler.js';
import { instrumentBackend } from './instrumented-backend.js';
import { DEFAULT_SERVER_LIMITS, type ServerLimits } from './limits.js';
import { createLockFeed } from './lock-feed.js';
import { createLogger, type Logger } from './logger.js';
import { isLoopbackHost } from './loopback.js';
import { type ConnectionRejection, createMetrics } from './metrics.js';
import { observeService } from './observed-service.js';
import { createOriginPolicy } from './origin-policy.js';
import type { Principal } from './permissions.js';
import { createSession, type LeaseRegistry, type Session } from './session.js';
import { sendTextFrame } from './text-frame.js';

export interface ServerOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** A backend the caller owns (the server will not close it). */
  backend?: LockBackend;
  /** Or the backend to open (and close on shutdown). Default: embedded, in memory. */
  backendConfig?: BackendConfig;
  logger?: Logger;
  /** What one client may take; each limit defaults to `DEFAULT_SERVER_LIMITS`'s. */
  limits?: Partial<ServerLimits>;
  /** The same as `limits.maxInflight`. */
  maxInflight?: number;
  /**
   * Bearer tokens (their SHA-256 and what each grants). With any, every WebSocket session and
   * every admin and metrics request must present one. Without, the server binds only loopback
   * addresses unless `insecure` is set.
   */
  auth?: readonly TokenGrant[];
  /** Listen on a non-loopback address without tokens (a warning is logged). */
  insecure?: boolean;
  /** PEM certificate (chain) and key: serve `wss://` and `https://` on the same port. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /**
   * Browser origins allowed besides the server's own pages (`https://ops.example.com`); `*`
   * allows any. Requests without an `Origin` header (not from a browser) are not affected.
   */
  allowedOrigins?: readonly string[];
  /** How often `/readyz` checks the backend, and how long it waits for an answer. */
  health?: HealthOptions;
  /** Passed to the lock service (limits, clock, timeouts); `limits.maxWaitersPerLock` wins. */
  service?: Omit<LockServiceOptions, 'backend'>;
}

export interface RunningServer {
  readonly host: string;
  readonly port: number;
  /** `ws://host:port/v1/ws` (`wss://` with TLS) */
  readonly url: string;
  /** `http://host:port` (`https://` with TLS): the dashboard, `/metrics`, `/readyz`, the admin API. */
  readonly httpUrl: string;
  /** The limits in force. */
  readonly limits: Readonly<ServerLimits>;
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

function refuse(socket: Duplex, status: string, reason: string, headers = ''): void {
  socket.end(
    `HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(reason)}\r\n${headers}\r\n${reason}`,
  );
}

/** One accepted WebSocket connection, as the heartbeat sees it. */
interface Connection {
  session: Session;
  /** Answered a ping (or sent anything) since the last ping. */
  alive: boolean;
}

/**
 * Starts a dlm server speaking protocol v1 over WebSocket at `/v1/ws`, with `GET /livez`,
 * `GET /readyz` (and `/healthz`, the same),
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
  const limits: ServerLimits = {
    ...DEFAULT_SERVER_LIMITS,
    ...(options.maxInflight === undefined ? {} : { maxInflight: options.maxInflight }),
    ...(options.service?.maxWaitersPerName === undefined
      ? {}
      : { maxWaitersPerLock: options.service.maxWaitersPerName }),
    ...options.limits,
  };
  const authenticator = createAuthenticator(options.auth ?? []);
  const loopback = isLoopbackHost(host);
  if (!authenticator.required && !loopback && !options.insecure) {
    throw new Error(
      `refusing to listen on ${host} without authentication: configure tokens (--auth-file), ` +
        'bind a loopback address, or pass --insecure',
    );
  }
  const origins = createOriginPolicy({
    allowedOrigins: options.allowedOrigins ?? [],
    authRequired: authenticator.required,
  });
  const backendConfig: BackendConfig = options.backendConfig ?? { kind: 'embedded', dataDir: null };
  const ownsBackend = options.backend === undefined;
  const clock = options.service?.clock ?? systemClock;
  const rawBackend = options.backend ?? (await createBackend(backendConfig, logger, { clock }));
  if (!ownsBackend) logger.info('backend attached', { backend: rawBackend.kind });
  // "backend connected" is logged by the health check once the backend has really answered.
  const health = createBackendHealth(
    rawBackend,
    logger,
    ownsBackend ? describeBackend(backendConfig) : { backend: rawBackend.kind },
    options.health,
  );
  await health.start();
  const backendTimeoutMs = options.service?.backendTimeoutMs ?? 10_000;
  const sessions = new Map<WebSocket, Connection>();
  // Upgrades in progress count too, so a burst of handshakes cannot overshoot the limits.
  let connections = 0;
  const perAddress = new Map<string, number>();
  const leases: LeaseRegistry = new Map();

  // Gauges read these at scrape time; they are all assigned before the server listens.
  const metrics = createMetrics({
    version: VERSION,
    backend: rawBackend.kind,
    gauges: {
      sessions: () => sessions.size,
      heldLocks: () => feed.localHeld,
      waiters: () => service.totalWaiters(),
      backendUp: () => (health.readiness().ready ? 1 : 0),
    },
  });
  const backend = instrumentBackend(rawBackend, metrics, logger, health);
  const core = createLockService({
    ...options.service,
    backend,
    maxWaitersPerName: limits.maxWaitersPerLock,
  });
  const feed = createLockFeed({
    backend,
    service: core,
    clock,
    backendTimeoutMs,
    waiters: (name) => core.waiters(name),
    onHoldEnded: (end, seconds) => metrics.hold(end, seconds),
  });
  const service = observeService(core, feed, metrics, logger);

  const handler = createHttpHandler({
    service,
    backend,
    clock,
    backendTimeoutMs,
    logger,
    metrics,
    authenticator,
    origins,
    dashboard: loadDashboard(),
    readiness: () => ({ ...health.readiness(), backend: backend.kind, sessions: sessions.size }),
  });
  // Against slowloris: a client must send its request head within headersTimeoutMs and the
  // whole request within requestTimeoutMs (Node checks every connectionsCheckingInterval).
  const httpOptions: HttpOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: Math.max(
      50,
      Math.min(30_000, Math.floor(limits.headersTimeoutMs / 4)),
    ),
  };
  const http = options.tls
    ? createHttpsServer(
        {
          ...httpOptions,
          cert: options.tls.cert,
          key: options.tls.key,
          // A TLS handshake that never finishes is the same attack one layer down.
          handshakeTimeout: limits.headersTimeoutMs,
        },
        handler,
      )
    : createServer(httpOptions, handler);
  if (options.tls) {
    // A failed handshake (a plain-HTTP client, a bad certificate on the other side) is the
    // client's problem: without a listener Node would only print it.
    http.on('tlsClientError', (error) =>
      logger.debug('TLS handshake failed', { error: error.message }),
    );
  }

  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_PAYLOAD_BYTES,
    perMessageDeflate: false,
    handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
  });

  function rejectUpgrade(
    socket: Duplex,
    reason: ConnectionRejection,
    status: string,
    text: string,
    headers = '',
  ): void {
    metrics.connectionEnded(reason);
    refuse(socket, status, text, headers);
  }

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
    const address = request.socket.remoteAddress ?? 'unknown';
    if (!origins.allows(request.headers.origin, request.headers.host)) {
      logger.warn('connection refused: origin not allowed', {
        origin: request.headers.origin,
        remoteAddress: address,
      });
      rejectUpgrade(socket, 'origin', '403 Forbidden', 'this origin is not allowed');
      return;
    }
    // A bearer token in the upgrade request authenticates the session at once; without one the
    // client may still send it in session.hello.
    // A server without tokens ignores credentials, as it ignores hello's auth.
    const token = authenticator.required ? bearerToken(request.headers.authorization) : undefined;
    let principal: Principal | null = null;
    if (token !== undefined) {
      principal = token === null ? null : authenticator.verify(token);
      if (!principal) {
        logger.warn('authentication failed', { remoteAddress: address });
        rejectUpgrade(
          socket,
          'unauthenticated',
          '401 Unauthorized',
          'UNAUTHENTICATED: the bearer token is not valid',
          'WWW-Authenticate: Bearer realm="dlm"\r\n',
        );
        return;
      }
    }
    if (connections >= limits.maxConnections) {
      rejectUpgrade(
        socket,
        'connection_limit',
        '503 Service Unavailable',
        `LIMIT_EXCEEDED: the server has ${limits.maxConnections} connections`,
        'Retry-After: 1\r\n',
      );
      return;
    }
    const fromAddress = perAddress.get(address) ?? 0;
    if (fromAddress >= limits.maxConnectionsPerAddress) {
      rejectUpgrade(
        socket,
        'address_limit',
        '429 Too Many Requests',
        `LIMIT_EXCEEDED: at most ${limits.maxConnectionsPerAddress} connections per address`,
        'Retry-After: 1\r\n',
      );
      return;
    }
    connections += 1;
    perAddress.set(address, fromAddress + 1);
    socket.once('close', () => {
      connections -= 1;
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws, principal, address));
  });

  function drop(ws: WebSocket, session: Session, reason: ConnectionRejection): void {
    metrics.connectionEnded(reason);
    logger.warn(
      reason === 'slow_reader'
        ? 'connection dropped: it does not read what it is sent'
        : 'connection dropped: no answer to ping',
      { session: session.id },
    );
    ws.terminate();
  }

  /**
   * Ends a connection the server gave up on: the close frame goes out after what is already
   * queued, and nothing more is read from the peer (a flooding client would otherwise keep the
   * server parsing its frames until the closing handshake times out). The socket goes a second
   * later whether or not the peer answered the close.
   */
  function closeAndStopReading(ws: WebSocket, code: number, reason: string): void {
    ws.close(code, reason);
    ws.pause();
    setTimeout(() => ws.terminate(), 1_000).unref();
  }

  /**
   * Holds a connection's writes until this turn's promise jobs have run, so the frames it gets
   * in one turn (replies, notifications) leave in one write instead of a syscall each.
   */
  function cork(ws: WebSocket): void {
    const socket = (ws as unknown as { _socket?: Socket })._socket;
    if (socket) corkUntil(socket, process.nextTick);
  }

  function accept(ws: WebSocket, principal: Principal | null, address: string): void {
    const helloTimer = setTimeout(() => {
      metrics.connectionEnded('hello_timeout');
      logger.info('connection closed: no session.hello in time', { session: session.id });
      closeAndStopReading(ws, CLOSE.HELLO_TIMEOUT, 'no session.hello in time');
    }, limits.helloTimeoutMs);
    const session: Session = createSession({
      service,
      limits: { ...limits, maxPayloadBytes: MAX_PAYLOAD_BYTES },
      serverVersion: VERSION,
      logger,
      feed,
      metrics,
      leases,
      authenticator,
      principal,
      remoteAddress: address,
      now: () => performance.now(),
      send: (text) => {
        if (ws.readyState !== ws.OPEN) return false;
        cork(ws);
        sendTextFrame(ws, text);
        // What the peer has not read stays in this process: past the bound, let it go.
        if (ws.bufferedAmount > limits.maxBufferedBytes) {
          drop(ws, session, 'slow_reader');
          return false;
        }
        return true;
      },
      end: (code, reason) => closeAndStopReading(ws, code, reason),
      onHello: () => clearTimeout(helloTimer),
    });
    const connection: Connection = { session, alive: true };
    sessions.set(ws, connection);
    logger.info('session opened', { session: session.id, remoteAddress: address });
    ws.on('message', (data, isBinary) => {
      connection.alive = true;
      session.handleFrame(isBinary ? null : data.toString());
    });
    ws.on('pong', () => {
      connection.alive = true;
    });
    // ws closes an oversize frame's connection with 1009 itself; the error is expected.
    ws.on('error', (error) =>
      logger.debug('connection error', { session: session.id, error: error.message }),
    );
    ws.on('close', (code) => {
      clearTimeout(helloTimer);
      sessions.delete(ws);
      session.close();
      logger.info('session closed', { session: session.id, code });
    });
  }

  // One timer for all connections: each gets a ping per interval, and one that has neither
  // answered the last ping nor sent anything since is dropped (so within two intervals).
  const heartbeat = setInterval(() => {
    for (const [ws, connection] of sessions) {
      if (!connection.alive) {
        drop(ws, connection.session, 'no_pong');
        continue;
      }
      connection.alive = false;
      ws.ping();
    }
  }, limits.pingIntervalMs);
  heartbeat.unref();

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 7070, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const port = (http.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  const [wsScheme, httpScheme] = options.tls ? ['wss', 'https'] : ['ws', 'http'];
  logger.info('listening', {
    ...(ownsBackend ? describeBackend(backendConfig) : { backend: rawBackend.kind }),
    auth: authenticator.required ? `${options.auth?.length} tokens` : 'none',
    // Last, so that no backend field can hide the address clients connect to.
    url: `${wsScheme}://${urlHost}:${port}${WS_PATH}`,
  });
  if (!authenticator.required && !loopback) {
    logger.warn(
      'no authentication on a non-loopback address (--insecure): anyone who can reach it can take and break locks',
      { host },
    );
  } else if (!options.tls && !loopback) {
    logger.warn(
      'tokens travel in cleartext: serve TLS (--tls-cert, --tls-key) or put TLS in front',
      {
        host,
      },
    );
  }

  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    url: `${wsScheme}://${urlHost}:${port}${WS_PATH}`,
    httpUrl: `${httpScheme}://${urlHost}:${port}`,
    backend: rawBackend,
    limits,
    close() {
      closing ??= (async () => {
        clearInterval(heartbeat);
        health.stop();
        http.close();
        // Pending waits answer CANCELLED before their connections close.
        await service.close();
        feed.close();
        await new Promise((resolve) => setImmediate(resolve));
        for (const ws of sessions.keys()) ws.close(CLOSE.GOING_AWAY, 'server shutting down');
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
