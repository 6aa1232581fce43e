import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { corkUntil } from '@dlm/core';
import type { WebSocket } from 'ws';
import { CLOSE } from './close-codes.js';
import type { ServerLimits } from './limits.js';
import type { ConnectionRejection } from './metrics.js';
import type { Principal } from './permissions.js';
import { createSession, type Session, type SessionContext } from './session.js';
import { sendTextFrame } from './text-frame.js';

/** What every session of a server shares; each connection adds its own parts. */
export type SharedSessionContext = Omit<
  SessionContext,
  'principal' | 'remoteAddress' | 'now' | 'send' | 'end' | 'onHello'
>;

export interface ConnectionsOptions {
  limits: ServerLimits;
  session: SharedSessionContext;
}

/** One accepted WebSocket connection, as the heartbeat sees it. */
interface Connection {
  session: Session;
  /** Answered a ping (or sent anything) since the last ping. */
  alive: boolean;
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

/** The server's open WebSocket connections: each one's session, the hello timer, the heartbeat. */
export class Connections {
  private readonly open = new Map<WebSocket, Connection>();
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(private readonly options: ConnectionsOptions) {}

  get size(): number {
    return this.open.size;
  }

  /**
   * One timer for all connections: each gets a ping per interval, and one that has neither
   * answered the last ping nor sent anything since is dropped (so within two intervals).
   */
  startHeartbeat(): void {
    this.heartbeat = setInterval(() => {
      for (const [ws, connection] of this.open) {
        if (!connection.alive) {
          this.drop(ws, connection.session, 'no_pong');
          continue;
        }
        connection.alive = false;
        ws.ping();
      }
    }, this.options.limits.pingIntervalMs);
    this.heartbeat.unref();
  }

  accept(ws: WebSocket, principal: Principal | null, address: string): void {
    const { limits, session: shared } = this.options;
    const { logger, metrics } = shared;
    const helloTimer = setTimeout(() => {
      metrics.connectionEnded('hello_timeout');
      logger.info('connection closed: no session.hello in time', { session: session.id });
      closeAndStopReading(ws, CLOSE.HELLO_TIMEOUT, 'no session.hello in time');
    }, limits.helloTimeoutMs);
    // Object.assign, not spread: past a few connections V8 gives each spread result a hidden
    // class of its own (about 450 bytes per session), while assigned ones share one.
    const session: Session = createSession(
      Object.assign({}, shared, {
        principal,
        remoteAddress: address,
        now: () => performance.now(),
        send: (text: string) => this.send(ws, session, text),
        end: (code: number, reason: string) => closeAndStopReading(ws, code, reason),
        onHello: () => clearTimeout(helloTimer),
      }),
    );
    const connection: Connection = { session, alive: true };
    this.open.set(ws, connection);
    logger.info('session opened', { session: session.id, remoteAddress: address });
    this.listen(ws, connection, helloTimer);
  }

  stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
  }

  /** Shutdown: asks every connection to close, waits up to 2 s, then cuts the rest. */
  async closeAll(): Promise<void> {
    for (const [ws, { session }] of this.open) {
      session.flush();
      ws.close(CLOSE.GOING_AWAY, 'server shutting down');
    }
    const deadline = Date.now() + 2_000;
    while (this.open.size && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    for (const ws of this.open.keys()) ws.terminate();
  }

  private listen(ws: WebSocket, connection: Connection, helloTimer: NodeJS.Timeout): void {
    const { session } = connection;
    const { logger } = this.options.session;
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
      this.open.delete(ws);
      session.close();
      logger.info('session closed', { session: session.id, code });
    });
  }

  private send(ws: WebSocket, session: Session, text: string): boolean {
    if (ws.readyState !== ws.OPEN) return false;
    cork(ws);
    sendTextFrame(ws, text);
    // What the peer has not read stays in this process: past the bound, let it go.
    if (ws.bufferedAmount > this.options.limits.maxBufferedBytes) {
      this.drop(ws, session, 'slow_reader');
      return false;
    }
    return true;
  }

  private drop(ws: WebSocket, session: Session, reason: ConnectionRejection): void {
    const { metrics, logger } = this.options.session;
    metrics.connectionEnded(reason);
    logger.warn(
      reason === 'slow_reader'
        ? 'connection dropped: it does not read what it is sent'
        : 'connection dropped: no answer to ping',
      { session: session.id },
    );
    ws.terminate();
  }
}
