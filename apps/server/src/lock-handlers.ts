import { performance } from 'node:perf_hooks';
import {
  type AcquireOptions,
  createLeaseKey,
  DlmError,
  formatToken,
  type Lease,
  type LockService,
  type LockSpec,
  type LostEvent,
  notHolderError,
  parseToken,
  type ReleaseRequestedEvent,
  validateLeaseKey,
  validateLocks,
  validateTtl,
} from '@dlm/core';
import type { RpcRequestId } from '@dlm/protocol';
import { lockView } from './held-state.js';
import { type Action, allows, type Principal } from './permissions.js';
import {
  type RequestReleaseMethod,
  releaseRequestHandlers,
  tellReleaseRequested,
} from './release-request-handlers.js';
import { createRequestTracer, type RequestTrace, type RequestTracer } from './request-tracing.js';
import type { Handler, Handlers, LockScope } from './session-scope.js';

type LockMethod =
  | 'lock.acquire'
  | 'lock.acquireAll'
  | 'lock.release'
  | 'lock.extend'
  | 'lock.get'
  | RequestReleaseMethod
  | 'lock.check';

/**
 * The name a lock method is about, and a check that the principal may `actions` on it. The
 * permission needs a valid name (a bad one is INVALID_PARAMS before any FORBIDDEN), so core's
 * `checkName` validates it here, and the service does not validate it again.
 */
export function permittedName(
  scope: LockScope,
  params: Record<string, unknown>,
  ...actions: Action[]
): string {
  const name = scope.context.service.checkName(params.name);
  const { principal } = scope;
  if (!actions.some((action) => allows(principal, action, name))) {
    throw forbidden(principal, actions, name);
  }
  return name;
}

function forbidden(principal: Principal, actions: Action[], name: string): DlmError {
  return new DlmError(
    'FORBIDDEN',
    `token ${JSON.stringify(principal.name)} may not ${actions.join(' or ')} ${JSON.stringify(name)}`,
  );
}

/**
 * The names of an acquireAll's set, as far as they can be read: for the permission and the
 * session's bound. Core checks the set itself (shape, count, names, modes, duplicates).
 */
export function namesOf(locks: unknown): string[] {
  if (!Array.isArray(locks)) return [];
  const names: string[] = [];
  for (const entry of locks) {
    const name = typeof entry === 'object' && entry !== null ? (entry as LockSpec).name : undefined;
    if (typeof name === 'string') names.push(name);
  }
  return names;
}

/**
 * The limit of a shared grant: the lease's own (core's `Lease.limit`), else the one asked for,
 * else the default (`maxHolders`: a read lock). Exclusive grants have none.
 */
function limitOf(lease: Lease, asked: unknown, maxHolders: number): number | undefined {
  if (lease.mode !== 'shared') return undefined;
  if (lease.limit !== undefined) return lease.limit;
  return typeof asked === 'number' ? asked : maxHolders;
}

/** The wire's grant of one lease: the only place a key is ever sent, to that acquire's caller. */
function grantOf(lease: Lease, limit: number | undefined) {
  return {
    name: lease.name,
    owner: lease.owner,
    token: formatToken(lease.token),
    ttlMs: lease.ttlMs,
    leaseKey: lease.leaseKey,
    mode: lease.mode,
    ...(limit === undefined ? {} : { limit }),
  };
}

/**
 * What the lock methods of one session share: its scope, its service, the tracer of its
 * requests' spans, and its leases' `onLost`.
 */
interface LockSession {
  readonly scope: LockScope;
  readonly service: LockService;
  readonly tracer: RequestTracer;
  /** Tells this session `lock.lost` for a lease granted or extended here. */
  readonly onLost: (event: LostEvent) => void;
  /** Tells this session `lock.releaseRequested` for a lease granted or extended here. */
  readonly onReleaseRequested: (event: ReleaseRequestedEvent) => void;
}

/** One request to a lock method: what was sent, what cancels it, and what its span records. */
interface LockRequest {
  readonly params: Record<string, unknown>;
  readonly signal: AbortSignal | undefined;
  readonly span: RequestTrace;
  /** Its JSON-RPC id, for the notifications about it (`lock.queued`). */
  readonly id: RpcRequestId | undefined;
}

function lockSession(scope: LockScope): LockSession {
  const { service } = scope.context;
  return {
    scope,
    service,
    tracer: createRequestTracer(scope.context.serverVersion, service.backend.kind),
    onLost: (event) => {
      scope.notify('lock.lost', {
        name: event.name,
        token: formatToken(event.token),
        reason: event.reason,
      });
    },
    onReleaseRequested: (event) => tellReleaseRequested(scope, event),
  };
}

/** Counts a lease as this session's, unless the connection closed meanwhile. */
function hold(scope: LockScope, lease: Lease): void {
  if (scope.open) scope.leases.hold(lease);
}

/**
 * The key a release or extend presents: the one sent, else this session's own for that lease
 * (it was granted here). Null: no proof, NOT_HOLDER, as for a wrong key. The service is never
 * called without a key: it would take the server's own tracking of the lease as the proof.
 */
function proofFor(
  scope: LockScope,
  name: string,
  token: bigint,
  params: Record<string, unknown>,
): string | null {
  if (params.leaseKey !== undefined) return validateLeaseKey(params.leaseKey);
  return scope.leases.keyFor(name, token);
}

/** The lease a release or extend is about, told to its span, and the proof it presents. */
function presented(scope: LockScope, params: Record<string, unknown>, span: RequestTrace) {
  const name = permittedName(scope, params, 'lock');
  const token = parseToken(params.token);
  if (span.recording) {
    span.set({ 'dlm.lock.name': name, 'dlm.lock.token': formatToken(token) });
  }
  return { name, token, leaseKey: proofFor(scope, name, token, params) };
}

/**
 * Without a key: the key of this session's own leases of `names` for that owner (an
 * idempotent re-acquire on the same connection; a set has one key, so they must share it),
 * else a fresh one. Never the service's default, which would hand any session naming the
 * owner the lease some other session holds.
 */
function acquireKey(
  scope: LockScope,
  names: readonly string[],
  owner: string,
  params: Record<string, unknown>,
): string {
  if (params.leaseKey !== undefined) return validateLeaseKey(params.leaseKey);
  let key: string | undefined;
  for (const name of names) {
    // Of several shared leases of the name for this owner, the latest.
    const own = scope.leases.get(name, owner);
    if (!own) continue;
    if (key !== undefined && own.leaseKey !== key) return createLeaseKey();
    key = own.leaseKey;
  }
  return key ?? createLeaseKey();
}

/** Whom an acquire of `names` is for: the owner it names (else the session's id), and its key. */
function claimOf(scope: LockScope, params: Record<string, unknown>, names: readonly string[]) {
  const owner = params.owner === undefined ? scope.id : (params.owner as string);
  return { owner, leaseKey: acquireKey(scope, names, owner, params) };
}

/** Makes room for the acquire of `names` (each one counts), or says why there is none. */
function reserveLocks(
  scope: LockScope,
  names: readonly string[],
  owner: string,
  leaseKey: string,
): void {
  const { maxLocksPerSession } = scope.context.limits;
  const { leases } = scope;
  // A lease this session holds already (same owner and key) is re-acquired, not added; another
  // owner or key of a name held shared is one more lease.
  let adding = 0;
  for (const name of names) if (!leases.holdsWith(name, owner, leaseKey)) adding += 1;
  // Stale entries are only swept when the count is near the bound.
  if (adding === 0 || leases.upperBound + scope.acquiring + adding <= maxLocksPerSession) return;
  if (leases.count() + scope.acquiring + adding <= maxLocksPerSession) return;
  throw new DlmError(
    'LIMIT_EXCEEDED',
    `a session may hold at most ${maxLocksPerSession} locks (acquires in flight included)`,
  );
}

/**
 * FORBIDDEN unless the principal may lock every name of the set; a malformed set is
 * INVALID_PARAMS before it is FORBIDDEN, as one name is (core's own check of a set).
 */
function permitSet(session: LockSession, locks: unknown): void {
  const { scope, service } = session;
  const names = validateLocks(locks, service.limits, service.checkName);
  const denied = names.find((name) => !allows(scope.principal, 'lock', name));
  if (denied !== undefined) throw forbidden(scope.principal, ['lock'], denied);
}

/** The ttl and wait an acquire asks for, as its span records them. */
function askedAttributes(params: Record<string, unknown>) {
  return {
    'dlm.lock.ttl_ms': params.ttlMs as number,
    'dlm.lock.wait_ms': (params.waitMs as number | undefined) ?? 0,
  };
}

/**
 * Counts `count` acquires as in flight (against the session's bound) and starts timing their
 * wait; the function returned, called once the service has answered, ends both.
 */
function startAcquiring(scope: LockScope, count: number, span: RequestTrace): () => void {
  const arrivedAt = span.recording ? performance.now() : 0;
  scope.acquiring += count;
  return () => {
    scope.acquiring -= count;
    if (span.recording) span.set({ 'dlm.lock.waited_ms': performance.now() - arrivedAt });
  };
}

/** What an acquire or acquireAll hands the service besides the locks: its key, cancel and hooks. */
function grantOptions(
  session: LockSession,
  leaseKey: string,
  signal: AbortSignal | undefined,
  span: RequestTrace,
) {
  return {
    leaseKey,
    ...(signal ? { signal } : {}),
    onLost: session.onLost,
    onReleaseRequested: session.onReleaseRequested,
    aroundBackendCall: span.aroundBackendCall,
  };
}

/**
 * With `progress: true`: the acquire's place among the waiters, told as `lock.queued` when it
 * starts waiting and whenever it changes. INVALID_PARAMS (field `progress`) unless a boolean.
 */
function progressOf(
  scope: LockScope,
  name: string,
  params: Record<string, unknown>,
  requestId: RpcRequestId | undefined,
): Pick<AcquireOptions, 'onQueued'> {
  const { progress } = params;
  if (progress !== undefined && typeof progress !== 'boolean') {
    throw new DlmError('INVALID_PARAMS', 'progress must be true or false', { field: 'progress' });
  }
  if (progress !== true || requestId === undefined) return {};
  return {
    onQueued: (position) => scope.notify('lock.queued', { requestId, name, position }),
  };
}

/** One acquire, its wait told to its span: the queue it joined, how long it took. */
function acquire(
  session: LockSession,
  { params, signal, span, id }: LockRequest,
): Promise<unknown> {
  try {
    const { scope, service } = session;
    const name = permittedName(scope, params, 'lock');
    const names = [name];
    const { owner, leaseKey } = claimOf(scope, params, names);
    const progress = progressOf(scope, name, params, id);
    reserveLocks(scope, names, owner, leaseKey);
    // Read before the service queues this acquire: the waiters ahead of it on this server.
    if (span.recording) {
      span.set({
        'dlm.lock.name': name,
        ...askedAttributes(params),
        'dlm.lock.queue_position': service.waiters(name),
      });
    }
    const options = acquireOptions(session, params, name, owner, leaseKey, signal, span);
    if (progress.onQueued) options.onQueued = progress.onQueued;
    const settled = startAcquiring(scope, 1, span);
    let granted: Promise<Lease>;
    try {
      granted = service.acquire(options);
    } catch (error) {
      settled();
      throw error;
    }
    // No async frame: a backend that answers at once is answered in the same turn.
    return granted.then(
      (lease) => {
        settled();
        return answerGrant(session, lease, params, span);
      },
      (error: unknown) => {
        settled();
        throw error;
      },
    );
  } catch (error) {
    return Promise.reject(error);
  }
}

/** What one acquire hands the service: one object, its optional fields set only when sent. */
function acquireOptions(
  session: LockSession,
  params: Record<string, unknown>,
  name: string,
  owner: string,
  leaseKey: string,
  signal: AbortSignal | undefined,
  span: RequestTrace,
): AcquireOptions {
  const options: AcquireOptions = {
    name,
    ttlMs: params.ttlMs as number,
    waitMs: params.waitMs as number,
    owner,
    leaseKey,
    onLost: session.onLost,
    onReleaseRequested: session.onReleaseRequested,
    aroundBackendCall: span.aroundBackendCall,
  };
  // The optional fields as sent, for core to check (validateAcquireFields): the one validation.
  for (const field of SENT_AS_IS) {
    if (params[field] !== undefined) Object.assign(options, { [field]: params[field] });
  }
  if (signal) options.signal = signal;
  return options;
}

/** The optional fields of `lock.acquire` the server hands core as they came. */
const SENT_AS_IS = [
  'mode',
  'limit',
  'requestRelease',
  'lockDelayMs',
  'maxHoldMs',
] as const satisfies ReadonlyArray<keyof AcquireOptions>;

/** A granted acquire: told to its span, held by this session, and its grant for the wire. */
function answerGrant(
  session: LockSession,
  lease: Lease,
  params: Record<string, unknown>,
  span: RequestTrace,
) {
  if (span.recording) {
    span.set({ 'dlm.lock.token': formatToken(lease.token), 'dlm.lock.ttl_ms': lease.ttlMs });
  }
  hold(session.scope, lease);
  return grantOf(lease, limitOf(lease, params.limit, session.service.limits.maxHolders));
}

/**
 * One acquireAll: every name permitted and counted against the session's bound before any is
 * taken; the service takes them all or none, and each granted lease is this session's.
 */
async function acquireAll(session: LockSession, { params, signal, span }: LockRequest) {
  const { scope, service } = session;
  const names = namesOf(params.locks);
  const { owner, leaseKey } = claimOf(scope, params, names);
  permitSet(session, params.locks);
  reserveLocks(scope, names, owner, leaseKey);
  if (span.recording) {
    span.set({
      'dlm.lock.names': names,
      'dlm.lock.count': names.length,
      ...askedAttributes(params),
    });
  }
  const specs = params.locks as LockSpec[];
  const settled = startAcquiring(scope, names.length, span);
  let leases: Lease[];
  try {
    leases = await service.acquireAll({
      locks: specs,
      ttlMs: params.ttlMs as number,
      waitMs: params.waitMs as number,
      owner,
      ...grantOptions(session, leaseKey, signal, span),
    });
  } finally {
    settled();
  }
  if (span.recording) {
    span.set({ 'dlm.lock.tokens': leases.map((lease) => formatToken(lease.token)) });
  }
  for (const lease of leases) hold(scope, lease);
  return {
    grants: leases.map((lease) => {
      const asked = specs.find((spec) => spec.name === lease.name)?.limit;
      return grantOf(lease, limitOf(lease, asked, service.limits.maxHolders));
    }),
  };
}

/** A release's answer: one object for all of them (it is only serialized). */
const RELEASED = Object.freeze({ released: true });
const released = () => RELEASED;

/** No async frame: the service's promise, answered with `RELEASED`; bad input rejects. */
function release(session: LockSession, { params, span }: LockRequest): Promise<unknown> {
  try {
    const { name, token, leaseKey } = presented(session.scope, params, span);
    if (leaseKey === null) throw notHolderError(name, token);
    // The lease's end reaches this session's count through core (holds) and the observer.
    return session.service
      .release({ name, token, leaseKey, aroundBackendCall: span.aroundBackendCall })
      .then(released);
  } catch (error) {
    return Promise.reject(error);
  }
}

async function extend(session: LockSession, { params, span }: LockRequest) {
  const { scope, service } = session;
  const { name, token, leaseKey } = presented(scope, params, span);
  // Bad input is told as such before NOT_HOLDER, as the service would.
  validateTtl(params.ttlMs, service.limits);
  if (leaseKey === null) throw notHolderError(name, token);
  const lease = await service.extend({
    name,
    token,
    ttlMs: params.ttlMs as number,
    leaseKey,
    onLost: session.onLost,
    onReleaseRequested: session.onReleaseRequested,
    aroundBackendCall: span.aroundBackendCall,
  });
  if (span.recording) span.set({ 'dlm.lock.ttl_ms': lease.ttlMs });
  // Extending with the key adopts the lease: its lock.lost now comes here, and it counts
  // as held here (a holder that reconnected to this server).
  hold(scope, lease);
  return { name: lease.name, token: formatToken(lease.token), ttlMs: lease.ttlMs };
}

async function getLock(session: LockSession, params: Record<string, unknown>) {
  return lockView(session.service, permittedName(session.scope, params, 'lock', 'watch'));
}

/** `lock.check`: whether the lease `token` holds `name` now; allowed wherever `lock.get` is. */
async function checkLock(session: LockSession, params: Record<string, unknown>) {
  const name = permittedName(session.scope, params, 'lock', 'watch');
  const token = parseToken(params.token);
  const current = await session.service.check(name, token);
  return { name, token: formatToken(token), current };
}

/** The handler of `method`: `run` inside the request's span, whose outcome is `outcome` on success. */
function traced(
  session: LockSession,
  method: LockMethod,
  outcome: string,
  run: (session: LockSession, request: LockRequest) => Promise<unknown>,
): Handler {
  return (params, signal, id) =>
    session.tracer.trace(method, params, outcome, (span) =>
      run(session, { params, signal, span, id }),
    );
}

/**
 * `lock.acquire`, `lock.acquireAll`, `lock.release`, `lock.extend`, `lock.get` and `lock.check` for one
 * caller: a WebSocket session, or one request of an HTTP door (`door.ts`), alike.
 */
export function lockHandlers(scope: LockScope): Handlers<LockMethod> {
  const session = lockSession(scope);
  return {
    'lock.acquire': traced(session, 'lock.acquire', 'granted', acquire),
    'lock.acquireAll': traced(session, 'lock.acquireAll', 'granted', acquireAll),
    'lock.release': traced(session, 'lock.release', 'released', release),
    'lock.extend': traced(session, 'lock.extend', 'extended', extend),
    'lock.get': (params) => getLock(session, params),
    'lock.check': (params) => checkLock(session, params),
    ...releaseRequestHandlers(scope, permittedName),
  };
}
