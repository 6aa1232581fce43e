import type { IncomingMessage } from 'node:http';
import { type Authenticator, bearerToken } from './auth.js';
import type { Logger } from './logger.js';
import type { OriginPolicy } from './origin-policy.js';
import { ANONYMOUS, type Principal } from './permissions.js';

/** What decides whom an HTTP request speaks for: the tokens, the origin rules, the log. */
export interface HttpGate {
  authenticator: Authenticator;
  origins: OriginPolicy;
  logger: Logger;
}

/** Why a request is refused before it is served; each route words it in its own format. */
export interface CallerRefusal {
  status: 401 | 403;
  code: 'UNAUTHENTICATED' | 'FORBIDDEN';
  /** Whether a credential was presented at all (a 401's message differs). */
  presented: boolean;
}

/**
 * Whom a request speaks for (everyone is ANONYMOUS without tokens), or why it may not speak:
 * a browser page from an origin not allowed (403), or no valid token on a server with tokens
 * (401, logged). `token` is the credential as the route reads it (`Authorization: Bearer`, or
 * Dapr's `dapr-api-token`): undefined when absent, null when present but malformed. One place
 * for every HTTP route, so that no route checks less than another.
 */
export function callerOf(
  gate: HttpGate,
  request: IncomingMessage,
  token: string | null | undefined,
): Principal | CallerRefusal {
  if (!gate.origins.allows(request.headers.origin, request.headers.host)) {
    return { status: 403, code: 'FORBIDDEN', presented: token !== undefined };
  }
  if (!gate.authenticator.required) return ANONYMOUS;
  const principal = token ? gate.authenticator.verify(token) : null;
  if (principal) return principal;
  gate.logger.warn('authentication failed', {
    path: request.url,
    remoteAddress: request.socket.remoteAddress,
  });
  return { status: 401, code: 'UNAUTHENTICATED', presented: token !== undefined };
}

export function isRefusal(caller: Principal | CallerRefusal): caller is CallerRefusal {
  return 'status' in caller;
}

/** A refusal worded for a route that takes `Authorization: Bearer`. */
export interface BearerRefusal extends CallerRefusal {
  message: string;
  headers: Record<string, string>;
}

/**
 * `callerOf` for the routes that take `Authorization: Bearer` (the admin API, metrics, the feed,
 * `POST /v1/rpc`): the principal, or the refusal with its message and headers.
 */
export function bearerCaller(gate: HttpGate, request: IncomingMessage): Principal | BearerRefusal {
  const caller = callerOf(gate, request, bearerToken(request.headers.authorization));
  if (!isRefusal(caller)) return caller;
  if (caller.status === 403)
    return Object.assign({}, caller, { message: 'this origin is not allowed', headers: {} });
  return Object.assign({}, caller, {
    message: caller.presented
      ? 'the bearer token is not valid'
      : 'this server requires a token: send Authorization: Bearer <token>',
    headers: { 'www-authenticate': 'Bearer realm="dlm"' },
  });
}
