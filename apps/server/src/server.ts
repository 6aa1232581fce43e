import { createServer, type ServerOptions as HttpOptions, type RequestListener } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import {
  createLockService,
  type LockBackend,
  type LockService,
  type LockServiceOptions,
  systemClock,
} from '@dlm/core';
import { readPackageVersion } from '@dlm/flags';
import { MAX_PAYLOAD_BYTES, SUBPROTOCOL, WS_PATH } from '@dlm/protocol';
import { WebSocketServer } from 'ws';
import { createAddressLimits } from './address-limits.js';
import { type Authenticator, createAuthenticator, type TokenGrant } from './auth.js';
import { type BackendHealth, createBackendHealth, type HealthOptions } from './backend-health.js';
import { describeBackend } from './backends/index.js';
import type { BackendConfig } from './config.js';
import { createBackend } from './create-backend.js';
import { type DaprGrpcDoor, startDaprGrpc } from './dapr-grpc.js';
import { createDaprHttpDoor } from './dapr-http.js';
import { createDaprLocks, type DaprLocks, type DaprOptions } from './dapr-locks.js';
import { loadDashboard } from './dashboard.js';
import { type Answering, createAnswering, type DoorContext } from './door.js';
import { createHttpHandler } from './http-handler.js';
import { createRpcDoor } from './http-rpc.js';
import { DEFAULT_SERVER_LIMITS, type ServerLimits } from './limits.js';
import { createLockFeed, feedingAcquires, type LockFeed } from './lock-feed.js';
import { createServerObserver, type ListLocks, listLocksOf } from './lock-observer.js';
import { createLogger, type Logger } from './logger.js';
import { isLoopbackHost } from './loopback.js';
import { createMetrics, type ServerMetrics } from './metrics.js';
import { createOriginPolicy, type OriginPolicy } from './origin-policy.js';
import { createLeaseHolders, type LeaseHolders } from './session-leases.js';
import { Connections } from './ws-connections.js';
import { createUpgradeGate } from './ws-upgrade.js';

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
  /**
   * Dapr's lock API: the stores (store name → lock-name prefix) served over HTTP at
   * `/v1.0-alpha1/lock/{store}`, and over gRPC on `grpcPort` when given.
   */
  dapr?: DaprOptions;
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
  /** The port of Dapr's gRPC API, when `dapr.grpcPort` was given. */
  readonly daprGrpcPort?: number;
  readonly backend: LockBackend;
  /**
   * Graceful shutdown: stop accepting, end pending waits with CANCELLED, close connections,
   * and close the backend if the server opened it (flushing the embedded journal).
   */
  close(): Promise<void>;
}

const VERSION: string = readPackageVersion(new URL('../package.json', import.meta.url));

/** The limits in force: the defaults, then what the options say (`limits` last). */
function resolveLimits(options: ServerOptions): ServerLimits {
  return Object.assign(
    {},
    DEFAULT_SERVER_LIMITS,
    options.maxInflight === undefined ? {} : { maxInflight: options.maxInflight },
    options.service?.maxWaitersPerName === undefined
      ? {}
      : { maxWaitersPerLock: options.service.maxWaitersPerName },
    options.limits,
  );
}

function assertMayListen(host: string, authRequired: boolean, insecure: boolean | undefined) {
  if (!authRequired && !isLoopbackHost(host) && !insecure) {
    throw new Error(
      `refusing to listen on ${host} without authentication: configure tokens (--auth-file), ` +
        'bind a loopback address, or pass --insecure',
    );
  }
}

/** The backend, whether the server opened it (and so closes it), and how to log it. */
interface OpenedBackend {
  backend: LockBackend;
  owned: boolean;
  describe: Record<string, unknown>;
}

async function openBackend(options: ServerOptions, logger: Logger): Promise<OpenedBackend> {
  if (options.backend) {
    logger.info('backend attached', { backend: options.backend.kind });
    return { backend: options.backend, owned: false, describe: { backend: options.backend.kind } };
  }
  const config: BackendConfig = options.backendConfig ?? { kind: 'embedded', dataDir: null };
  const clock = options.service?.clock ?? systemClock;
  const backend = await createBackend(config, logger, { clock });
  return { backend, owned: true, describe: describeBackend(config) };
}

/** The lock service and what derives from it: every part reports to the one observer. */
interface LockWiring {
  metrics: ServerMetrics;
  service: LockService;
  feed: LockFeed;
  holders: LeaseHolders;
  list: ListLocks | undefined;
  totalWaiters(): number;
}

function wireLocks(
  options: ServerOptions,
  limits: ServerLimits,
  backend: LockBackend,
  logger: Logger,
  health: BackendHealth,
): LockWiring {
  const clock = options.service?.clock ?? systemClock;
  const backendTimeoutMs = options.service?.backendTimeoutMs ?? 10_000;
  const metrics = createMetrics({ version: VERSION, backend: backend.kind });
  const observer = createServerObserver({ metrics, logger, health, backendKind: backend.kind });
  if (options.service?.observer) observer.add(options.service.observer);
  const core = createLockService(
    Object.assign({}, options.service, {
      backend,
      maxWaitersPerName: limits.maxWaitersPerLock,
      observer,
    }),
  );
  const list = listLocksOf(backend, clock, backendTimeoutMs, observer);
  const feed = createLockFeed({
    service: core,
    clock,
    list,
    onHoldEnded: (end, seconds) => metrics.hold(end, seconds),
  });
  const holders = createLeaseHolders();
  // The feed and the lease holders need the service, so they join the observer after it.
  observer.add(holders);
  observer.add(feed);
  const service = feedingAcquires(core, feed);
  return { metrics, service, feed, holders, list, totalWaiters: () => observer.totalWaiters() };
}

/**
 * The HTTP(S) server. Against slowloris: a client must send its request head within
 * headersTimeoutMs and the whole request within requestTimeoutMs (Node checks every
 * connectionsCheckingInterval).
 */
function createHttpServer(
  options: ServerOptions,
  limits: ServerLimits,
  handler: RequestListener,
  logger: Logger,
) {
  const httpOptions: HttpOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: Math.max(
      50,
      Math.min(30_000, Math.floor(limits.headersTimeoutMs / 4)),
    ),
  };
  if (!options.tls) return createServer(httpOptions, handler);
  const https = createHttpsServer(
    Object.assign({}, httpOptions, {
      cert: options.tls.cert,
      key: options.tls.key,
      // A TLS handshake that never finishes is the same attack one layer down.
      handshakeTimeout: limits.headersTimeoutMs,
    }),
    handler,
  );
  // A failed handshake (a plain-HTTP client, a bad certificate on the other side) is the
  // client's problem: without a listener Node would only print it.
  https.on('tlsClientError', (error) =>
    logger.debug('TLS handshake failed', { error: error.message }),
  );
  return https;
}

type HttpServer = ReturnType<typeof createHttpServer>;

/** Serves protocol v1 on `http`'s upgrades to `WS_PATH`, for the connections that pass the gate. */
function serveWebSocket(
  http: HttpServer,
  gate: Omit<Parameters<typeof createUpgradeGate>[0], 'accept'>,
  connections: Connections,
): void {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_PAYLOAD_BYTES,
    perMessageDeflate: false,
    handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
  });
  const upgrade = createUpgradeGate({
    accept: (request, socket, head, principal, address) =>
      wss.handleUpgrade(request, socket, head, (ws) => connections.accept(ws, principal, address)),
    ...gate,
  });
  http.on('upgrade', upgrade);
}

function listen(http: HttpServer, port: number, host: string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    http.once('error', reject);
    http.listen(port, host, () => {
      http.off('error', reject);
      resolve((http.address() as AddressInfo).port);
    });
  });
}

function logListening(
  logger: Logger,
  opened: OpenedBackend,
  options: ServerOptions,
  host: string,
  url: string,
  authRequired: boolean,
): void {
  logger.info(
    'listening',
    Object.assign({}, opened.describe, {
      auth: authRequired ? `${options.auth?.length} tokens` : 'none',
      // Last, so that no backend field can hide the address clients connect to.
      url,
    }),
  );
  const loopback = isLoopbackHost(host);
  if (!authRequired && !loopback) {
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
}

/** Everything `startServer` put together, in the order it was built. */
interface Parts {
  logger: Logger;
  limits: ServerLimits;
  authenticator: Authenticator;
  origins: OriginPolicy;
  opened: OpenedBackend;
  health: BackendHealth;
  locks: LockWiring;
  connections: Connections;
}

function sessionsOf(parts: Omit<Parts, 'connections'>): Connections {
  const { limits, locks } = parts;
  return new Connections({
    limits,
    session: {
      service: locks.service,
      limits: Object.assign({}, limits, { maxPayloadBytes: MAX_PAYLOAD_BYTES }),
      serverVersion: VERSION,
      logger: parts.logger,
      feed: locks.feed,
      metrics: locks.metrics,
      holders: locks.holders,
      authenticator: parts.authenticator,
    },
  });
}

/** Dapr's lock API: its stores, and the calls both of its doors make. */
interface Dapr {
  options: DaprOptions;
  locks: DaprLocks;
}

/** What the HTTP doors (`POST /v1/rpc`, Dapr's lock API) serve with: the WebSocket's parts. */
function doorContextOf(parts: Parts): DoorContext {
  const { limits, locks } = parts;
  return {
    service: locks.service,
    limits: Object.assign({}, limits, { maxPayloadBytes: MAX_PAYLOAD_BYTES }),
    serverVersion: VERSION,
    metrics: locks.metrics,
    authenticator: parts.authenticator,
    origins: parts.origins,
    logger: parts.logger,
    addresses: createAddressLimits(limits, () => performance.now()),
    answering: createAnswering(),
  };
}

function httpHandlerOf(parts: Parts, doors: DoorContext, dapr: Dapr): RequestListener {
  const { locks, health, connections, opened } = parts;
  return createHttpHandler({
    service: locks.service,
    list: locks.list,
    logger: parts.logger,
    metrics: locks.metrics,
    authenticator: parts.authenticator,
    origins: parts.origins,
    dashboard: loadDashboard(),
    feed: locks.feed,
    readiness: () => {
      const { ready, ...said } = health.readiness();
      return { ready, ...said, backend: opened.backend.kind, sessions: connections.size };
    },
    doors: [
      createRpcDoor(doors),
      createDaprHttpDoor(doors, dapr.options, dapr.locks, () => health.readiness().ready),
    ],
  });
}

/**
 * Graceful shutdown: stop accepting, end pending waits with CANCELLED, close connections, and
 * close the backend if the server opened it.
 */
async function shutDown(
  parts: Parts,
  http: HttpServer,
  answering: Answering,
  grpc?: DaprGrpcDoor,
): Promise<void> {
  const { connections, health, locks, opened, logger } = parts;
  connections.stopHeartbeat();
  health.stop();
  http.close();
  // Pending waits answer CANCELLED before their connections close.
  await locks.service.close();
  await grpc?.close();
  // The HTTP doors' answers (CANCELLED among them) go out before their connections close.
  await answering.settled(1_000);
  locks.feed.close();
  await new Promise((resolve) => setImmediate(resolve));
  await connections.closeAll();
  http.closeAllConnections();
  if (opened.owned) {
    await opened.backend.close();
    logger.info('backend closed', { backend: opened.backend.kind });
  }
  logger.info('stopped');
}

/**
 * Starts a dlm server speaking protocol v1 over WebSocket at `/v1/ws`, with `GET /livez`,
 * `GET /readyz` (and `/healthz`, the same),
 * Prometheus metrics at `GET /metrics`, the admin API under `/v1/locks`, the dashboard at `/`, the
 * lock methods over plain HTTP at `POST /v1/rpc`, and Dapr's lock API (`options.dapr`).
 *
 * @example
 * const server = await startServer({ port: 0 });
 * console.log(server.url); // ws://127.0.0.1:54321/v1/ws
 * await server.close();
 */
export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  const logger = options.logger ?? createLogger('silent');
  const host = options.host ?? '127.0.0.1';
  const limits = resolveLimits(options);
  const authenticator = createAuthenticator(options.auth ?? []);
  assertMayListen(host, authenticator.required, options.insecure);
  const origins = createOriginPolicy({
    allowedOrigins: options.allowedOrigins ?? [],
    authRequired: authenticator.required,
  });
  const opened = await openBackend(options, logger);
  // "backend connected" is logged by the health check once the backend has really answered.
  const health = createBackendHealth(opened.backend, logger, opened.describe, options.health);
  await health.start();
  const locks = wireLocks(options, limits, opened.backend, logger, health);
  const early = { logger, limits, authenticator, origins, opened, health, locks };
  const parts: Parts = Object.assign({}, early, { connections: sessionsOf(early) });
  const { connections } = parts;
  locks.metrics.bindGauges({
    sessions: () => connections.size,
    heldLocks: () => locks.feed.localHeld,
    sharedHeld: () => locks.feed.localShared,
    waiters: () => locks.totalWaiters(),
    backendUp: () => (health.readiness().ready ? 1 : 0),
  });

  const doors = doorContextOf(parts);
  const dapr = {
    options: options.dapr ?? { stores: {} },
    locks: createDaprLocks(doors, options.dapr ?? { stores: {} }),
  };
  const http = createHttpServer(options, limits, httpHandlerOf(parts, doors, dapr), logger);
  serveWebSocket(
    http,
    { limits, authenticator, origins, metrics: locks.metrics, logger },
    connections,
  );
  connections.startHeartbeat();
  let port: number;
  try {
    port = await listen(http, options.port ?? 7070, host);
  } catch (error) {
    // The port is taken (or not ours to bind): give back what was opened, the data dir's LOCK
    // first among them, so that nothing of this attempt is left behind.
    await shutDown(parts, http, doors.answering).catch(() => {});
    throw error;
  }
  const urlHost = host.includes(':') ? `[${host}]` : host;
  const [wsScheme, httpScheme] = options.tls ? ['wss', 'https'] : ['ws', 'http'];
  const url = `${wsScheme}://${urlHost}:${port}${WS_PATH}`;
  const grpc =
    options.dapr?.grpcPort === undefined
      ? undefined
      : await startDaprGrpc(doors, dapr.options, dapr.locks, {
          host,
          port: options.dapr.grpcPort,
          ...(options.tls ? { tls: options.tls } : {}),
        }).catch(async (error: unknown) => {
          http.close();
          await shutDown(parts, http, doors.answering);
          throw error;
        });
  logListening(logger, opened, options, host, url, authenticator.required);
  if (grpc) logger.info('Dapr gRPC API listening', { port: grpc.port });

  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    url,
    httpUrl: `${httpScheme}://${urlHost}:${port}`,
    backend: opened.backend,
    limits,
    ...(grpc ? { daprGrpcPort: grpc.port } : {}),
    close() {
      closing ??= shutDown(parts, http, doors.answering, grpc);
      return closing;
    },
  };
}
