import { type Static, type TProperties, type TSchema, Type } from '@sinclair/typebox';
import { TRACEPARENT_PATTERN } from './traceparent.js';

/**
 * The one source of the protocol's shapes: the TypeScript types below are derived from these
 * schemas, and the published JSON Schema (`@dlm/protocol/schema.json`) is emitted from them.
 * Semantic checks a schema cannot express exactly (UTF-8 byte lengths, token range) are
 * stated in `description` and enforced by `@dlm/core`'s validation, the only validation.
 */

const Name = Type.String({
  minLength: 1,
  maxLength: 256,
  description: 'Lock name: 1-256 UTF-8 bytes, no control characters (U+0000-U+001F, U+007F).',
});
const Owner = Type.String({
  minLength: 1,
  maxLength: 128,
  description: 'Who holds the lock: 1-128 UTF-8 bytes. Defaults to the session id.',
});
const Token = Type.String({
  pattern: '^[1-9][0-9]{0,18}$',
  description: 'Fencing token: the decimal string of an integer in [1, 2^63-1].',
});
const leaseKey = (description: string) =>
  Type.String({ minLength: 22, maxLength: 128, pattern: '^[A-Za-z0-9_-]{22,128}$', description });
const LeaseKey = leaseKey(
  "The lease's secret, which proves holding: 22-128 characters of [A-Za-z0-9_-]. Chosen by the client (at least 128 random bits), else made by the server. Only the acquire's caller is ever sent it.",
);
const TtlMs = Type.Integer({
  description: 'Lease length in ms, in [limits.minTtlMs, limits.maxTtlMs].',
});
const WaitMs = Type.Integer({
  minimum: 0,
  description: 'How long to wait for a held lock, in ms, in [0, limits.maxWaitMs]. 0 = try-lock.',
});

/**
 * Extension (shared modes, additive to v1): `mode` and `limit` on acquires. `shared` without a
 * limit is a read lock (limit `limits.maxHolders`); with limit N, a semaphore of N permits.
 */
/** The two modes, with a description of what the field says where it appears. */
function modeSchema(description: string) {
  return Type.Union([Type.Literal('exclusive'), Type.Literal('shared')], { description });
}
const Mode = modeSchema(
  'How the lock is held: "exclusive" (the default: one holder) or "shared" (up to limit holders at once; refused with INVALID_PARAMS, field mode, by servers whose backend grants exclusive locks only).',
);
const Limit = Type.Integer({
  minimum: 1,
  description:
    'The most shared holders the name admits at once, in [1, limits.maxHolders], default maxHolders (a read lock): only with mode "shared" (with "exclusive" it is INVALID_PARAMS, field limit). Every shared holder of a name agrees on it: another limit is INVALID_PARAMS, field limit, with data.limit the holders\' one.',
});
/** Extension (lock-delay, additive to v1): `lockDelayMs` on `lock.acquire`. */
const LockDelayMs = Type.Integer({
  minimum: 0,
  description:
    'Lock-delay, in ms, in [0, limits.maxLockDelayMs], default 0: when this lease ends by expiry or revocation (not by its holder\'s release), nobody is granted the name until lockDelayMs after that end (a try-lock meanwhile is LOCK_HELD with data.lockDelayRemainingMs; a waiter is granted when the delay has passed). Exclusive locks only (with mode "shared", above 0 is INVALID_PARAMS, field lockDelayMs, as on servers whose backend keeps no lock-delays).',
});
/** Extension (a cap on holding, additive to v1): `maxHoldMs` on `lock.acquire`. */
const MaxHoldMs = Type.Integer({
  minimum: 1,
  description:
    'A cap on holding, in ms, in [ttlMs, limits.maxHoldMs]; absent: none. No lock.extend keeps the lease past its grant plus maxHoldMs: one that would is granted up to the cap only (its result\'s ttlMs says how much), and at the cap the lease ends and its holder gets lock.lost with reason "maxHold". An idempotent re-acquire keeps the first grant\'s cap. Out of range, or on a server whose backend keeps no caps: INVALID_PARAMS, field maxHoldMs.',
});
const LockDelayRemainingMs = Type.Integer({
  minimum: 1,
  description:
    'The name is free but in its lock-delay (its last lease, acquired with lockDelayMs, ended by expiry or revocation): nobody is granted it for this long yet. Absent when there is none.',
});
const GrantedMode = modeSchema('The mode the lease is held in (the one asked for).');
const GrantedLimit = Type.Integer({
  minimum: 1,
  description: 'Shared grants only: the limit the holders agreed on.',
});
/** One holder of a name, as `lock.get` lists it. */
const Holder = Type.Object({
  owner: Type.String({ minLength: 1, maxLength: 128 }),
  token: Type.String({ pattern: '^[1-9][0-9]{0,18}$' }),
  ttlRemainingMs: Type.Integer({ minimum: 0 }),
});

export const RequestId = Type.Union([Type.Integer(), Type.String()]);

/**
 * Extension (trace context, additive to v1): any request's params may carry the caller's W3C
 * `traceparent`. A server ignores one it cannot parse (the request is served, in a new trace).
 */
const Traceparent = Type.String({
  pattern: TRACEPARENT_PATTERN,
  maxLength: 512,
  description:
    "The caller's W3C Trace Context traceparent (version-traceid-parentid-flags, lowercase hex), so that the server's spans join the caller's trace. Optional on every request; a server ignores a value it cannot parse and serves the request in a new trace.",
});

/** A request's params: `properties` and the optional `traceparent` every request may carry. */
function params<T extends TProperties>(properties: T) {
  return Type.Object({ ...properties, traceparent: Type.Optional(Traceparent) });
}

/**
 * Extension (multi-message frames, additive to v1): a client asks with `frames: "multi"` in
 * `session.hello`; a server that speaks it answers `frames: "multi"`. Only then may a frame, either
 * way, be a JSON array of independent messages (SPEC.md, "Several messages per frame").
 */
export const FRAMES_MULTI = 'multi';
const Frames = Type.Literal(FRAMES_MULTI, {
  description:
    'Multi-message frames (extension): in session.hello params, the client asks for them; in its result, the server agrees. Once agreed, a text frame either way may be a JSON array of independent messages, each answered on its own.',
});

export const HelloParams = params({
  client: Type.Optional(Type.Object({ name: Type.String(), version: Type.String() })),
  auth: Type.Optional(Type.String()),
  frames: Type.Optional(Frames),
});
export const HelloResult = Type.Object({
  sessionId: Type.String(),
  frames: Type.Optional(Frames),
  protocol: Type.Literal('dlm.v1'),
  server: Type.Object({ name: Type.Literal('dlm'), version: Type.String() }),
  backend: Type.String({
    description: 'The backend kind: embedded, redis, redlock, etcd, zookeeper.',
  }),
  limits: Type.Object({
    maxPayloadBytes: Type.Integer(),
    maxNameBytes: Type.Integer(),
    minTtlMs: Type.Integer(),
    maxTtlMs: Type.Integer(),
    maxWaitMs: Type.Integer(),
    maxInflight: Type.Integer(),
    maxLocksPerRequest: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'The most locks one lock.acquireAll may list (64 by default). Absent only from servers without lock.acquireAll.',
      }),
    ),
    maxHolders: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'The most shared holders one name admits (10,000 by default): the largest limit, and the default one. Absent only from servers that predate shared modes.',
      }),
    ),
    maxLockDelayMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          'The longest lockDelayMs an acquire may ask for (60,000 by default). Absent only from servers that predate lock-delays.',
      }),
    ),
    maxHoldMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          'The longest maxHoldMs an acquire may ask for (604,800,000, 7 days, by default); 0 when the backend keeps no caps on holding. Absent only from servers that predate caps on holding.',
      }),
    ),
  }),
});

export const Empty = Type.Object({});
export const PingParams = params({});

/** Extension (lease keys, additive to v1): `leaseKey` in acquire, release and extend. */
export const AcquireParams = params({
  name: Name,
  ttlMs: TtlMs,
  waitMs: Type.Optional(WaitMs),
  owner: Type.Optional(Owner),
  leaseKey: Type.Optional(LeaseKey),
  mode: Type.Optional(Mode),
  limit: Type.Optional(Limit),
  requestRelease: Type.Optional(
    Type.Boolean({
      description:
        'Extension (release requests): when true and the acquire has to wait (waitMs > 0, the lock held), the server asks the holders to let go as lock.requestRelease does (no reason), once, when the wait starts.',
    }),
  ),
  progress: Type.Optional(
    Type.Boolean({
      description:
        'Extension (queue positions): true to receive lock.queued notifications while this acquire waits: its 1-based position among the waiters when it starts waiting, and again whenever it changes.',
    }),
  ),
  lockDelayMs: Type.Optional(LockDelayMs),
  maxHoldMs: Type.Optional(MaxHoldMs),
});
const GrantFields = {
  name: Name,
  owner: Owner,
  token: Token,
  ttlMs: TtlMs,
  leaseKey: Type.Optional(
    Type.String({
      description:
        'The lease key (the one sent, or one the server made). Always sent by servers with lease keys; absent only from older servers.',
    }),
  ),
};
export const AcquireResult = Type.Object({
  ...GrantFields,
  mode: Type.Optional(
    modeSchema(
      'The mode the lease is held in (the one asked for). Absent only from servers that predate modes.',
    ),
  ),
  limit: Type.Optional(GrantedLimit),
});

/** One lock of a `lock.acquireAll`. */
const LockSpec = Type.Object({
  name: Name,
  mode: Type.Optional(Mode),
  limit: Type.Optional(Limit),
});
/** Extension (multi-locks, additive to v1; servers without it answer METHOD_NOT_FOUND). */
export const AcquireAllParams = params({
  locks: Type.Array(LockSpec, {
    minItems: 1,
    description:
      'The locks to take, all or nothing: 1 to limits.maxLocksPerRequest of them, names distinct (INVALID_PARAMS, field locks, otherwise).',
  }),
  ttlMs: TtlMs,
  waitMs: Type.Optional(WaitMs),
  owner: Type.Optional(Owner),
  leaseKey: Type.Optional(
    leaseKey(
      'One secret for every lease of the set: 22-128 characters of [A-Za-z0-9_-]. Chosen by the client (at least 128 random bits), else made by the server. Only the caller is ever sent it.',
    ),
  ),
});
export const AcquireAllResult = Type.Object({
  grants: Type.Array(
    Type.Object({ ...GrantFields, mode: GrantedMode, limit: Type.Optional(GrantedLimit) }),
    {
      minItems: 1,
      description: 'One grant per lock, in request order; each has its own fencing token.',
    },
  ),
});

const HolderKey = leaseKey(
  "The lease's key. Without it only the session that was granted the lease may release or extend it.",
);
export const ReleaseParams = params({
  name: Name,
  token: Token,
  leaseKey: Type.Optional(HolderKey),
});
export const ReleaseResult = Type.Object({ released: Type.Literal(true) });

export const ExtendParams = params({
  name: Name,
  token: Token,
  ttlMs: TtlMs,
  leaseKey: Type.Optional(HolderKey),
});
export const ExtendResult = Type.Object({ name: Name, token: Token, ttlMs: TtlMs });

/**
 * What shared modes add to a held lock's report (`lock.get`, `lock.watchPrefix`): its mode, the
 * limit its holders agreed on and every holder, with `holdersDescription` saying which holders.
 */
function sharedHolding(holdersDescription: string) {
  return {
    mode: Type.Optional(
      modeSchema('How it is held. Absent only from servers that predate shared modes.'),
    ),
    limit: Type.Optional(GrantedLimit),
    holders: Type.Optional(Type.Array(Holder, { minItems: 1, description: holdersDescription })),
  };
}

/** Extension (queue positions): how many wait for a name, and across what. */
const WaitersFields = {
  waiters: Type.Optional(
    Type.Integer({
      minimum: 0,
      description:
        'How many acquires wait for the name (in the scope waitersScope says). Absent only from servers that predate it.',
    }),
  ),
  waitersScope: Type.Optional(
    Type.Union([Type.Literal('backend'), Type.Literal('server')], {
      description:
        'What waiters counts: "backend", every dlm server\'s waiters (the backend keeps one shared queue it can count), or "server", this server\'s only.',
    }),
  ),
};

export const GetParams = params({ name: Name });
export const GetResult = Type.Union([
  Type.Object({
    name: Name,
    held: Type.Literal(false),
    ...WaitersFields,
    lockDelayRemainingMs: Type.Optional(LockDelayRemainingMs),
  }),
  Type.Object({
    name: Name,
    held: Type.Literal(true),
    owner: Type.String({ minLength: 1, maxLength: 128, description: 'The highest-token holder.' }),
    token: Token,
    ttlRemainingMs: Type.Integer({ minimum: 0 }),
    ...sharedHolding(
      'Every holder, ordered by token (one, when exclusive). Absent only from servers that predate shared modes.',
    ),
    ...WaitersFields,
  }),
]);

/** Extension (token checks, additive to v1; servers without it answer METHOD_NOT_FOUND). */
export const CheckParams = params({ name: Name, token: Token });
export const CheckResult = Type.Object({
  name: Name,
  token: Token,
  current: Type.Boolean({
    description:
      'True exactly when a lease with this token holds the name now (for a shared name: the token is among the holders), on any server of the deployment.',
  }),
});

export const WatchParams = params({ name: Name });
export const WatchResult = Type.Object({
  watchId: Type.String(),
  held: Type.Boolean(),
  token: Type.Optional(Token),
});
export const UnwatchParams = params({ watchId: Type.String() });

const Prefix = Type.String({
  maxLength: 256,
  description:
    'A lock-name prefix: 0-256 UTF-8 bytes, no control characters. The empty string matches every lock.',
});
/** A held lock as `lock.watchPrefix` reports it. */
export const HeldLock = Type.Object({
  name: Name,
  owner: Owner,
  token: Token,
  ttlRemainingMs: Type.Integer({ minimum: 0 }),
  waiters: Type.Integer({ minimum: 0, description: 'Waiters queued on this server.' }),
  ...sharedHolding(
    "Every holder this server knows of, ordered by token; owner, token and ttlRemainingMs above are the highest token's.",
  ),
});
/** Extension (added after v1's first release; servers without it answer METHOD_NOT_FOUND). */
export const WatchPrefixParams = params({ prefix: Prefix });
export const WatchPrefixResult = Type.Object({
  watchId: Type.String(),
  locks: Type.Array(HeldLock, {
    description: 'The held locks under the prefix that this server knows of, by name.',
  }),
});

export const LockChangedParams = Type.Object({
  watchId: Type.String(),
  name: Name,
  held: Type.Boolean(),
  owner: Type.Optional(Owner),
  token: Type.Optional(Token),
  /** Sent on `lock.watchPrefix` watches only: what happened. */
  event: Type.Optional(
    Type.Union([
      Type.Literal('acquired'),
      Type.Literal('extended'),
      Type.Literal('released'),
      Type.Literal('expired'),
      Type.Literal('revoked'),
      Type.Literal('waiters'),
    ]),
  ),
  /** `lock.watchPrefix` only: the lease left (acquired, extended). */
  ttlRemainingMs: Type.Optional(Type.Integer({ minimum: 0 })),
  /** `lock.watchPrefix` only: waiters queued on this server for the lock. */
  waiters: Type.Optional(Type.Integer({ minimum: 0 })),
  /** Shared modes: the mode of the lease the change is about, when known. */
  mode: Type.Optional(
    modeSchema('The mode of the lease the change is about, when the server knows it.'),
  ),
  /** `lock.watchPrefix` only: the holders' limit, for a shared lease. */
  limit: Type.Optional(GrantedLimit),
  /** Shared modes: how many holders the name has after the change. */
  holders: Type.Optional(
    Type.Integer({
      minimum: 0,
      description:
        'How many holders the name has after the change (held is holders > 0). Absent only from servers that predate shared modes.',
    }),
  ),
});
/**
 * Extension (release requests, additive to v1; servers without it answer METHOD_NOT_FOUND): ask
 * the holders of a lock to let go. Nothing is released; an operator's revoke is the forced form.
 */
const Reason = Type.String({
  minLength: 1,
  maxLength: 256,
  description:
    'Why, for the holder: 1-256 UTF-8 bytes, no control characters (INVALID_PARAMS, field reason, otherwise).',
});
export const RequestReleaseParams = params({ name: Name, reason: Type.Optional(Reason) });
export const RequestReleaseResult = Type.Object({
  name: Name,
  notified: Type.Integer({
    minimum: 0,
    description:
      'The holders the backend listed when the request was made (0 when the lock was free: nothing is sent). Each is sent lock.releaseRequested by the server that follows its lease, whichever server of those sharing the backend that is; a holder whose session has closed hears nothing.',
  }),
});
export const LockReleaseRequestedParams = Type.Object({
  name: Name,
  token: Token,
  reason: Type.Optional(Reason),
});

/** Extension (queue positions): a waiting acquire's place, for one sent with `progress: true`. */
export const LockQueuedParams = Type.Object({
  requestId: Type.Union([Type.Integer(), Type.String()], {
    description: "The waiting lock.acquire's JSON-RPC id.",
  }),
  name: Name,
  position: Type.Integer({
    minimum: 1,
    description:
      "The acquire's 1-based place among the waiters lock.get's waiters counts, in their order: its place in the backend's queue (across servers) where waitersScope is \"backend\", else among this server's waiters in the order they started waiting.",
  }),
});
export const LockLostParams = Type.Object({
  name: Name,
  token: Token,
  reason: Type.Union([
    Type.Literal('expired'),
    Type.Literal('revoked'),
    Type.Literal('maxHold', {
      description:
        'Extension (a cap on holding): the lease reached its grant plus the maxHoldMs it was acquired with.',
    }),
  ]),
});

export const ErrorData = Type.Object(
  {
    code: Type.String({ description: 'Stable error name: LOCK_HELD, NOT_HOLDER, ...' }),
    retryable: Type.Boolean(),
    field: Type.Optional(Type.String({ description: 'INVALID_PARAMS: the offending field.' })),
    ttlRemainingMs: Type.Optional(Type.Integer({ minimum: 0 })),
    lockDelayRemainingMs: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          'LOCK_HELD: the name is free but in its lock-delay for this long yet (ttlRemainingMs says the same).',
      }),
    ),
    indeterminate: Type.Optional(Type.Boolean()),
    name: Type.Optional(
      Type.String({
        description:
          'lock.acquireAll (LOCK_HELD, UNAVAILABLE, CANCELLED): the lock that could not be had.',
      }),
    ),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'INVALID_PARAMS field limit: the limit the current shared holders agreed on (absent when the limit itself was out of range).',
      }),
    ),
  },
  { additionalProperties: true },
);
export const ErrorObject = Type.Object({
  code: Type.Integer(),
  message: Type.String(),
  data: ErrorData,
});

/** Every request method: its params and its result. */
export const Methods = {
  'session.hello': { params: HelloParams, result: HelloResult },
  'session.ping': { params: PingParams, result: Empty },
  'lock.acquire': { params: AcquireParams, result: AcquireResult },
  'lock.acquireAll': { params: AcquireAllParams, result: AcquireAllResult },
  'lock.release': { params: ReleaseParams, result: ReleaseResult },
  'lock.extend': { params: ExtendParams, result: ExtendResult },
  'lock.get': { params: GetParams, result: GetResult },
  'lock.requestRelease': { params: RequestReleaseParams, result: RequestReleaseResult },
  'lock.check': { params: CheckParams, result: CheckResult },
  'lock.watch': { params: WatchParams, result: WatchResult },
  'lock.unwatch': { params: UnwatchParams, result: Empty },
  'lock.watchPrefix': { params: WatchPrefixParams, result: WatchPrefixResult },
} as const satisfies Record<string, { params: TSchema; result: TSchema }>;

/** Every server notification and its params. */
export const Notifications = {
  'lock.changed': LockChangedParams,
  'lock.lost': LockLostParams,
  'lock.releaseRequested': LockReleaseRequestedParams,
  'lock.queued': LockQueuedParams,
} as const satisfies Record<string, TSchema>;

export type MethodName = keyof typeof Methods;
export type NotificationName = keyof typeof Notifications;
export type ParamsOf<M extends MethodName> = Static<(typeof Methods)[M]['params']>;
export type ResultOf<M extends MethodName> = Static<(typeof Methods)[M]['result']>;
export type NotificationParams<N extends NotificationName> = Static<(typeof Notifications)[N]>;
export type RpcErrorObject = Static<typeof ErrorObject>;
export type RpcRequestId = Static<typeof RequestId>;
