import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { SUBPROTOCOL, WS_PATH } from '@dlm/protocol';
import { type Authenticator, bearerToken } from './auth.js';
import type { ServerLimits } from './limits.js';
import type { Logger } from './logger.js';
import type { ConnectionRejection, ServerMetrics } from './metrics.js';
import type { OriginPolicy } from './origin-policy.js';
import type { Principal } from './permissions.js';

export function refuse(socket: Duplex, status: string, reason: string, headers = ''): void {
  socket.end(
    `HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(reason)}\r\n${headers}\r\n${reason}`,
  );
}

export interface UpgradeGateOptions {
  limits: ServerLimits;
  authenticator: Authenticator;
  origins: OriginPolicy;
  metrics: ServerMetrics;
  logger: Logger;
  /** The upgrade passed every check: complete it. */
  accept(
    request: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    principal: Principal | null,
    address: string,
  ): void;
}

/** A refusal: the reason counted in metrics (none for a wrong path or subprotocol) and the reply. */
interface Refusal {
  reason?: ConnectionRejection;
  status: string;
  text: string;
  headers?: string;
}

const RETRY = 'Retry-After: 1\r\n';

function protocolRefusal(request: IncomingMessage): Refusal | null {
  const path = (request.url ?? '/').split('?')[0];
  if (path !== WS_PATH) {
    return { status: '404 Not Found', text: `the WebSocket endpoint is ${WS_PATH}` };
  }
  const offered = request.headers['sec-websocket-protocol'];
  if (offered !== undefined && !offered.split(',').some((p) => p.trim() === SUBPROTOCOL)) {
    return { status: '400 Bad Request', text: `unsupported subprotocol: offer ${SUBPROTOCOL}` };
  }
  return null;
}

/**
 * A bearer token in the upgrade request authenticates the session at once; without one the
 * client may still send it in session.hello. A server without tokens ignores credentials, as
 * it ignores hello's auth. `false`: a token that is not valid.
 */
function principalOf(
  authenticator: Authenticator,
  request: IncomingMessage,
): Principal | null | false {
  const token = authenticator.required ? bearerToken(request.headers.authorization) : undefined;
  if (token === undefined) return null;
  return (token === null ? null : authenticator.verify(token)) ?? false;
}

/**
 * The checks a WebSocket upgrade passes before it becomes a session: the path and subprotocol,
 * the browser origin, a bearer token if it carries one, and the connection limits (in all and
 * per address; upgrades in progress count too, so a burst of handshakes cannot overshoot them).
 */
export function createUpgradeGate(options: UpgradeGateOptions) {
  const { limits, authenticator, origins, metrics, logger } = options;
  let connections = 0;
  const perAddress = new Map<string, number>();

  function limitRefusal(address: string): Refusal | null {
    if (connections >= limits.maxConnections) {
      return {
        reason: 'connection_limit',
        status: '503 Service Unavailable',
        text: `LIMIT_EXCEEDED: the server has ${limits.maxConnections} connections`,
        headers: RETRY,
      };
    }
    if ((perAddress.get(address) ?? 0) >= limits.maxConnectionsPerAddress) {
      return {
        reason: 'address_limit',
        status: '429 Too Many Requests',
        text: `LIMIT_EXCEEDED: at most ${limits.maxConnectionsPerAddress} connections per address`,
        headers: RETRY,
      };
    }
    return null;
  }

  function refuseWith(socket: Duplex, refusal: Refusal): void {
    if (refusal.reason) metrics.connectionEnded(refusal.reason);
    refuse(socket, refusal.status, refusal.text, refusal.headers);
  }

  /** Counts the connection against the limits until its socket closes. */
  function count(socket: Duplex, address: string): void {
    connections += 1;
    perAddress.set(address, (perAddress.get(address) ?? 0) + 1);
    socket.once('close', () => {
      connections -= 1;
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
  }

  /** Where a gate check failed, with what to tell the client; null when all passed. */
  function check(request: IncomingMessage, address: string): Refusal | Principal | null {
    const wrong = protocolRefusal(request);
    if (wrong) return wrong;
    if (!origins.allows(request.headers.origin, request.headers.host)) {
      logger.warn('connection refused: origin not allowed', {
        origin: request.headers.origin,
        remoteAddress: address,
      });
      return { reason: 'origin', status: '403 Forbidden', text: 'this origin is not allowed' };
    }
    const principal = principalOf(authenticator, request);
    if (principal === false) {
      logger.warn('authentication failed', { remoteAddress: address });
      return {
        reason: 'unauthenticated',
        status: '401 Unauthorized',
        text: 'UNAUTHENTICATED: the bearer token is not valid',
        headers: 'WWW-Authenticate: Bearer realm="dlm"\r\n',
      };
    }
    return limitRefusal(address) ?? principal;
  }

  return (request: IncomingMessage, socket: Duplex, head: Buffer): void => {
    socket.on('error', () => {});
    const address = request.socket.remoteAddress ?? 'unknown';
    const outcome = check(request, address);
    if (outcome && 'status' in outcome) {
      refuseWith(socket, outcome);
      return;
    }
    count(socket, address);
    options.accept(request, socket, head, outcome, address);
  };
}
