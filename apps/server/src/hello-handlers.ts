import { DlmError } from '@dlm/core';
import { FRAMES_MULTI, PROTOCOL } from '@dlm/protocol';
import { ANONYMOUS, type Principal } from './permissions.js';
import type { Handlers, SessionScope } from './session-scope.js';

/**
 * Whom a `session.hello` speaks for: its `auth` token, else the upgrade's bearer token. A server
 * without tokens ignores credentials.
 */
function helloPrincipal(scope: SessionScope, auth: unknown): Principal {
  const { authenticator } = scope.context;
  let who = scope.context.principal;
  if (auth !== undefined) {
    if (typeof auth !== 'string') {
      throw new DlmError('INVALID_PARAMS', 'auth must be a string', { field: 'auth' });
    }
    if (authenticator.required) {
      who = authenticator.verify(auth);
      if (!who) throw new DlmError('UNAUTHENTICATED', 'the token in auth is not valid');
    }
  }
  if (authenticator.required && !who) {
    throw new DlmError(
      'UNAUTHENTICATED',
      'this server requires a token: send it as session.hello auth or as Authorization: Bearer',
    );
  }
  return who ?? ANONYMOUS;
}

/** `session.hello` and `session.ping`. */
export function helloHandlers(scope: SessionScope): Handlers<'session.hello' | 'session.ping'> {
  const { context } = scope;
  return {
    'session.hello': async (params) => {
      if (scope.helloDone)
        throw new DlmError('INVALID_REQUEST', 'session.hello was already sent on this connection');
      scope.principal = helloPrincipal(scope, params.auth);
      scope.helloDone = true;
      context.onHello?.(scope.principal);
      // Multi-message frames when asked for; another value (a later framing) is not spoken here.
      const multi = params.frames === FRAMES_MULTI;
      if (multi) scope.startMultiFrames();
      const { service, limits } = context;
      const bounds = service.limits;
      return {
        sessionId: scope.id,
        protocol: PROTOCOL,
        server: { name: 'dlm', version: context.serverVersion },
        backend: service.backend.kind,
        limits: {
          maxPayloadBytes: limits.maxPayloadBytes,
          maxNameBytes: bounds.maxNameBytes,
          minTtlMs: bounds.minTtlMs,
          maxTtlMs: bounds.maxTtlMs,
          maxWaitMs: bounds.maxWaitMs,
          maxInflight: limits.maxInflight,
          maxLocksPerRequest: bounds.maxLocksPerRequest,
          maxHolders: bounds.maxHolders,
          maxLockDelayMs: bounds.maxLockDelayMs,
          maxHoldMs: bounds.maxHoldMs,
        },
        ...(multi ? { frames: FRAMES_MULTI } : {}),
      };
    },

    'session.ping': async () => ({}),
  };
}
