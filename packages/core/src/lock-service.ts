import { attempt } from './acquire-attempt.js';
import { waitForGrant } from './acquire-wait.js';
import type { LockBackend, LockState } from './backend.js';
import { createBackendCalls } from './backend-calls.js';
import { onBackendEvent, openName } from './backend-events.js';
import { type Clock, systemClock } from './clock.js';
import { DlmError } from './errors.js';
import {
  cancelCheck,
  check,
  forgetHolders,
  holdersOf,
  modeOfView,
  scheduleCheck,
  viewOf,
} from './holder-view.js';
import {
  type LeaseSpec,
  leaseOf,
  lose,
  specOfLease,
  tellLost,
  track,
  untrack,
  untrackAll,
} from './lease-tracking.js';
import { localLoop } from './local-queue.js';
import { cancelledError, lockHeld, notHolderError, ranOutError } from './lock-errors.js';
import { type AcquireAllOptions, acquireAll, type SetOperations } from './multi-acquire.js';
import {
  dropIfIdle,
  followsEnd,
  type NameState,
  type QueuedAcquire,
  type ServiceContext,
  type ServiceSettings,
  waitersOf,
} from './name-state.js';
import { type AroundBackendCall, type LockObserver, observerNotifier } from './observer.js';
import { acquireProof, checkToken, proofOf, toLease } from './proofs.js';
import { backendQueueOf, type WaitersScope } from './queue-positions.js';
import {
  type ReleaseRequestedEvent,
  type ReleaseRequestOptions,
  type ReleaseRequestResult,
  requestRelease,
} from './release-requests.js';
import {
  DEFAULT_LIMITS,
  type Limits,
  type LockMode,
  validateAcquireFields,
  validateLeaseKey,
  validateName,
  validateOwner,
  validateTtl,
} from './validation.js';

/** A lease granted by the service. `ttlMs` is what the backend granted (≥ the request). */
export interface Lease {
  name: string;
  owner: string;
  token: bigint;
  ttlMs: number;
  /** How it is held: the request's mode. */
  mode: LockMode;
  /** With `shared`: the most holders at once, which every holder of the name agreed on. */
  limit?: number;
  /**
   * The secret that proves holding (see `AcquireOptions.leaseKey`). Only the acquire's caller
   * gets it; never show it in logs, `get`, `watch` or anything a non-holder sees.
   */
  leaseKey: string;
}

export interface LostEvent {
  name: string;
  token: bigint;
  /** `maxHold`: it reached its cap on holding (`AcquireOptions.maxHoldMs`). */
  reason: 'expired' | 'revoked' | 'maxHold';
}

/**
 * What `watch` reports: the lock's new state after a grant, release, expiry or revocation, on
 * every backend (where the backend has no expiry events, core checks each lease at its end).
 * `extended`: a check found the holder's lease runs longer than core knew (extended through
 * another service instance); it is not a new grant.
 */
export interface LockChange {
  name: string;
  held: boolean;
  type: 'acquired' | 'extended' | 'released' | 'expired' | 'revoked';
  /** The holder after a grant; the ended lease's, when known, after an end. */
  owner?: string;
  token?: bigint;
  /** The mode of the lease the change is about, when known. */
  mode?: LockMode;
  /**
   * How many holders the name has after the change: from the backend's event when it says,
   * else from the holders this service follows (0 when free). `held` is `holders > 0`.
   */
  holders: number;
  /** While held, the lease left, when core knows it. */
  ttlRemainingMs?: number;
}

export interface AcquireOptions {
  name: string;
  owner: string;
  ttlMs: number;
  /** 0 (the default) is a try-lock; otherwise wait up to this long, first come first served. */
  waitMs?: number;
  /**
   * Default `exclusive`. `shared`: one of up to `limit` holders at once (a read lock, a
   * semaphore's permit), on a backend with `capabilities.sharedModes` (INVALID_PARAMS, field
   * `mode`, elsewhere).
   */
  mode?: LockMode;
  /**
   * Only for `shared` (INVALID_PARAMS, field `limit`, otherwise): 1 to `limits.maxHolders`,
   * default `maxHolders`. Every shared holder of a name at one time has the same limit.
   */
  limit?: number;
  /**
   * 0 (the default) to `limits.maxLockDelayMs`, exclusive only, on a backend with
   * `capabilities.lockDelay` (INVALID_PARAMS, field `lockDelayMs`, otherwise): when this lease
   * ends by expiry or revocation, nobody is granted the name until this long after its end
   * (a try-lock meanwhile is LOCK_HELD with `lockDelayRemainingMs`, a wait goes on). A release
   * ends it with no delay.
   */
  lockDelayMs?: number;
  /**
   * A cap on holding: absent (none), or `ttlMs` to `limits.maxHoldMs`, exclusive only, on a backend with
   * `capabilities.maxHold` (INVALID_PARAMS, field `maxHoldMs`, otherwise). No extend keeps the
   * lease past its grant plus this: one that would is granted up to the cap only (its `ttlMs`
   * says how much), and at the cap the lease ends and its holder hears `lost` with reason
   * `maxHold`. An idempotent re-acquire keeps the first grant's cap.
   */
  maxHoldMs?: number;
  /** Ends a wait early with CANCELLED. */
  signal?: AbortSignal;
  /**
   * A wait's progress: called with its 1-based place among the name's waiters when it starts
   * waiting (the lock was not free), and again each time that place changes. The waiters are
   * those `countWaiters` counts: the backend's queue, across dlm servers, where it counts them
   * (its order), else this service's (in the order they started waiting). Not called for a
   * wait granted without waiting.
   */
  onQueued?: (position: number) => void;
  /** Called once when the granted lease ends other than by a release (expiry, revocation). */
  onLost?: (event: LostEvent) => void;
  /**
   * Called each time someone asks the holder to let go (`LockService.requestRelease`, through
   * any service sharing the backend). Nothing is released: letting go is the holder's choice.
   */
  onReleaseRequested?: (event: ReleaseRequestedEvent) => void;
  /**
   * With a wait: when the lock is held and this acquire starts to wait, ask its holders to let
   * go (as `requestRelease` does, without a reason), once.
   */
  requestRelease?: boolean;
  /**
   * The lease's secret (22-128 characters of `[A-Za-z0-9_-]`); releases and extends present it,
   * on any service sharing the backend. Absent: the key of the lease this service already
   * holds for `owner`, if any, else a fresh random one. The same owner while held gets the same
   * lease back only with the same key. A server that serves many clients through one service
   * must always pass it (each client's own, or one it keeps per session): the fallbacks below
   * treat the service's caller as the holder.
   */
  leaseKey?: string;
  /** Wraps each backend call made for this acquire, retries after a wake included (a tracer). */
  aroundBackendCall?: AroundBackendCall | undefined;
}

/**
 * A release's or extend's proof of holding: the lease's key, or none for a lease this service
 * granted and still tracks (a caller in the same process). Anything else is NOT_HOLDER.
 */
export interface ReleaseRequest {
  name: string;
  token: bigint;
  leaseKey?: string;
  /** See `AcquireOptions.aroundBackendCall`. */
  aroundBackendCall?: AroundBackendCall | undefined;
}

export interface ExtendOptions {
  name: string;
  token: bigint;
  ttlMs: number;
  /** See `ReleaseRequest.leaseKey`. */
  leaseKey?: string;
  /** Replaces the lease's `onLost` (a holder that reconnected elsewhere extends its lease). */
  onLost?: (event: LostEvent) => void;
  /** Replaces the lease's `onReleaseRequested`, as `onLost`. */
  onReleaseRequested?: (event: ReleaseRequestedEvent) => void;
  /** See `AcquireOptions.aroundBackendCall`. */
  aroundBackendCall?: AroundBackendCall | undefined;
}

export interface LockServiceOptions {
  backend: LockBackend;
  clock?: Clock;
  /** Bounds for requests; `minTtlMs` is raised to the backend's own minimum. */
  limits?: Partial<Limits>;
  /** Waiters allowed in one name's queue on this service (LIMIT_EXCEEDED past it). */
  maxWaitersPerName?: number;
  /**
   * The longest any backend call may take before the caller gets UNAVAILABLE. Adapters bound
   * their own calls; this is the backstop so that no request hangs whatever an adapter does.
   */
  backendTimeoutMs?: number;
  /**
   * How long a waiter sleeps before asking again when the backend could not say how long the
   * holder's lease has left. Backends that report it (all built-in ones) never use this.
   */
  unknownTtlRetryMs?: number;
  /** Told of every grant, extend, release, lost lease, queue length and backend call. */
  observer?: LockObserver;
}

export interface LockService {
  readonly backend: LockBackend;
  readonly limits: Readonly<Limits>;
  acquire(options: AcquireOptions): Promise<Lease>;
  /** Every lock of the set or none, without deadlocks (see `multi-acquire.ts`). */
  acquireAll(options: AcquireAllOptions): Promise<Lease[]>;
  release(request: ReleaseRequest): Promise<void>;
  extend(options: ExtendOptions): Promise<Lease>;
  /**
   * Who holds `name`, or null when free: the highest-token holder's `owner`, `token` and
   * `ttlRemainingMs`, with `mode` and `holders` (ordered by token) always filled, and `limit`
   * for shared holders.
   */
  get(name: string): Promise<LockState | null>;
  /**
   * Whether the lease `token` holds `name` now (for a shared name: `token` is among its
   * holders), as the backend says: across every server of the deployment, read-only. For a
   * resource that cannot store a token but can ask (Chubby's sequencer check).
   */
  check(name: string, token: bigint): Promise<boolean>;
  /**
   * How long `name`'s lock-delay has left (see `AcquireOptions.lockDelayMs`): 0 while held, when
   * none runs, and on a backend without `capabilities.lockDelay`.
   */
  lockDelayOf(name: string): Promise<number>;
  /**
   * Ends every lease that holds `name` (each shared holder, or the exclusive one); each holder
   * is told `lock.lost` (revoked). Resolves with the state before, or null when it was free.
   */
  revoke(name: string): Promise<LockState | null>;
  watch(name: string, listener: (change: LockChange) => void): () => void;
  /**
   * Asks every holder of `name` to let go, on whatever service sharing the backend follows its
   * lease (`AcquireOptions.onReleaseRequested`); releases nothing. `notified`: the holders the
   * backend listed (see `release-requests.ts`).
   */
  requestRelease(options: ReleaseRequestOptions): Promise<ReleaseRequestResult>;
  /**
   * Whether the lease `token` of `name`, granted or extended through this service, is still
   * followed as held: false once its end was seen, even when that end overtook the reply. Per
   * lease: several shared holders of one name may be held through one service.
   */
  holds(name: string, token: bigint): boolean;
  /** Waiters queued on this service for `name`. */
  waiters(name: string): number;
  /**
   * How many requests wait for `name` (`lock.get`'s `waiters`), and across what: on a backend
   * whose queue orders and counts waiters across dlm servers (`BackendQueue.count`), the
   * backend's queue (`"backend"`: one read); else this service's (`"server"`, as `waiters`).
   * `onQueued` places are counted across the same.
   */
  countWaiters(name: string): Promise<{ waiters: number; waitersScope: WaitersScope }>;
  /**
   * `name` checked against this service's limits (INVALID_PARAMS otherwise), for a caller that
   * needs a valid name before it calls the service (a permission check). The service does not
   * check the name it was just given a second time: a request's name is validated once.
   */
  checkName(name: unknown): string;
  /** Ends every wait with CANCELLED and stops all timers. Does not close the backend. */
  close(): Promise<void>;
}

/**
 * Builds waits, FIFO fairness, validation and lock-lost detection over any backend.
 *
 * The parts, each in its own module: the per-name state (`name-state.ts`), the bounded,
 * observed backend call (`backend-calls.ts`), one try (`acquire-attempt.ts`), a wait
 * (`acquire-wait.ts`: the one wait loop, `wait-loop.ts`, over the backend's queue driver or
 * this service's FIFO, `local-queue.ts`),
 * lease tracking (`lease-tracking.ts`), the holder view behind `watch` and lock-lost detection
 * (`holder-view.ts`), backend events (`backend-events.ts`), proofs and lease keys (`proofs.ts`).
 *
 * @example
 * const service = createLockService({ backend: await embeddedBackend() });
 * const lease = await service.acquire({ name: 'jobs', owner: 'worker-1', ttlMs: 10_000, waitMs: 5_000 });
 * await service.release({ name: 'jobs', token: lease.token });
 */
export function createLockService(options: LockServiceOptions): LockService {
  const ctx = createContext(options);
  const set: SetOperations = {
    clock: ctx.clock,
    limits: ctx.limits,
    checkName: ctx.checkName,
    acquire: (acquireOptions) => acquire(ctx, acquireOptions),
    release: (request) => release(ctx, request),
    extend: (extendOptions) => extend(ctx, extendOptions),
  };
  return {
    backend: ctx.backend,
    limits: ctx.limits,
    acquire: set.acquire,
    acquireAll: (allOptions) => acquireAll(set, allOptions),
    release: set.release,
    extend: set.extend,
    get: (name) => get(ctx, name),
    check: (name, token) => checkLease(ctx, name, token),
    lockDelayOf: (name) => lockDelayOf(ctx, name),
    revoke: (name) => revoke(ctx, name),
    watch: (name, listener) => watch(ctx, name, listener),
    requestRelease: (request) => requestRelease(ctx, request),
    holds(name, token) {
      const state = ctx.names.get(name);
      return state !== undefined && leaseOf(state, token) !== undefined;
    },
    waiters(name) {
      const state = ctx.names.get(name);
      return state ? waitersOf(state) : 0;
    },
    countWaiters: (name) => countWaiters(ctx, name),
    checkName: ctx.checkName,
    close: () => close(ctx),
  };
}

function createContext(options: LockServiceOptions): ServiceContext {
  const { backend } = options;
  const clock = options.clock ?? systemClock;
  const limits: Limits = Object.assign({}, DEFAULT_LIMITS, options.limits);
  limits.minTtlMs = Math.max(limits.minTtlMs, backend.capabilities.minTtlMs);
  // A backend that keeps no lock-delays admits none: what `session.hello` announces.
  if (!backend.capabilities.lockDelay) limits.maxLockDelayMs = 0;
  // Likewise caps on holding.
  if (!backend.capabilities.maxHold) limits.maxHoldMs = 0;
  const leaseTimers = !backend.capabilities.expiryEvents;
  const settings: ServiceSettings = {
    maxWaiters: options.maxWaitersPerName ?? 10_000,
    backendTimeoutMs: options.backendTimeoutMs ?? 10_000,
    unknownTtlRetryMs: options.unknownTtlRetryMs ?? 1_000,
    leaseTimers,
    checkDelayMs: leaseTimers ? 1 : 250,
  };
  const notify = observerNotifier(options.observer);
  const ctx: ServiceContext = {
    backend,
    clock,
    limits,
    settings,
    names: new Map(),
    calls: createBackendCalls(backend, clock, settings.backendTimeoutMs, notify),
    notify,
    onEvent: (state, event) => onBackendEvent(ctx, state, event),
    checkName: nameCheck(limits),
    closed: false,
  };
  return ctx;
}

/**
 * Validates names, remembering the last valid one: a caller that checked a name before calling
 * (`LockService.checkName`) is not checked again. Validity depends only on the string and the
 * limits, so a remembered name is as good as a new check.
 */
function nameCheck(limits: Limits): (value: unknown) => string {
  let last: string | undefined;
  return (value) => {
    if (last !== undefined && value === last) return last;
    last = validateName(value, limits);
    return last;
  };
}

function noSharedModes(ctx: ServiceContext): DlmError {
  return new DlmError(
    'INVALID_PARAMS',
    `mode "shared" is not supported by the ${ctx.backend.kind} backend yet: it grants exclusive locks only`,
    { field: 'mode' },
  );
}

/**
 * What this service's backend cannot keep, refused before the fields' ranges (which are [0, 0]
 * without it): the backend is why, not the number.
 */
function refuseUnkept(ctx: ServiceContext, options: AcquireOptions): void {
  const { lockDelay, maxHold } = ctx.backend.capabilities;
  const value = options.lockDelayMs as unknown;
  if (!lockDelay && typeof value === 'number' && value > 0) {
    throw refused('lockDelayMs', `is not supported by the ${ctx.backend.kind} backend yet`);
  }
  if (!maxHold && options.maxHoldMs !== undefined) {
    throw refused('maxHoldMs', `is not supported by the ${ctx.backend.kind} backend yet`);
  }
}

/** A shared acquire: on a backend with shared modes, and without a lock-delay or a cap. */
function refuseForShared(ctx: ServiceContext, lockDelayMs: number, maxHoldMs?: number): void {
  if (!ctx.backend.capabilities.sharedModes) throw noSharedModes(ctx);
  if (lockDelayMs > 0) throw refused('lockDelayMs', 'is for exclusive locks only');
  if (maxHoldMs !== undefined) throw refused('maxHoldMs', 'is for exclusive locks only');
}

function refused(field: string, message: string): DlmError {
  return new DlmError('INVALID_PARAMS', `${field} ${message}`, { field });
}

function assertOpen(ctx: ServiceContext): void {
  if (ctx.closed) throw new DlmError('UNAVAILABLE', 'the lock service is shutting down');
}

/**
 * Reports a lease an acquire or extend returns. Only one still followed as held: a lease whose
 * end overtook the reply (its release, its expiry) was never held here as far as anyone knows.
 */
function reportGrant(
  ctx: ServiceContext,
  lease: Lease,
  event: 'granted' | 'extended',
  waitedMs: number,
): Lease {
  const state = ctx.names.get(lease.name);
  if (!state || !leaseOf(state, lease.token)) return lease;
  if (event === 'granted') ctx.notify('granted', lease, waitedMs);
  else ctx.notify('extended', lease);
  return lease;
}

async function acquire(ctx: ServiceContext, options: AcquireOptions): Promise<Lease> {
  const { limits } = ctx;
  const name = ctx.checkName(options.name);
  const owner = validateOwner(options.owner, limits);
  refuseUnkept(ctx, options);
  const fields = validateAcquireFields(options, limits);
  const { ttlMs, waitMs, mode, limit, lockDelayMs, maxHoldMs } = fields;
  if (mode === 'shared') refuseForShared(ctx, lockDelayMs, maxHoldMs);
  const givenKey = options.leaseKey === undefined ? undefined : validateLeaseKey(options.leaseKey);
  assertOpen(ctx);
  if (options.signal?.aborted) throw cancelledError();
  const state = openName(ctx, name);
  const { leaseKey, keyHash, holder } = acquireProof(state, owner, givenKey, mode);
  const isHolder = holder !== undefined;
  const queued: QueuedAcquire = {
    request: {
      name,
      owner,
      ttlMs,
      keyHash,
      mode,
      limit,
      ...(lockDelayMs > 0 && { lockDelayMs }),
      ...(maxHoldMs !== undefined && { maxHoldMs }),
    },
    leaseKey,
    onLost: options.onLost,
    onReleaseRequested: options.onReleaseRequested,
    around: options.aroundBackendCall,
  };
  const startedAt = ctx.clock.now();
  state.busy += 1;
  try {
    if (waitMs > 0 && !isHolder) {
      const lease = await waitForGrant(ctx, state, options, queued, waitMs);
      return reportGrant(ctx, lease, 'granted', ctx.clock.now() - startedAt);
    }
    return reportGrant(ctx, await tryOnce(ctx, state, queued, isHolder), 'granted', 0);
  } finally {
    state.busy -= 1;
    dropIfIdle(ctx, state);
  }
}

/**
 * A try-lock. It does not jump the queue: while others wait here, only the holder's idempotent
 * re-acquire goes to the backend.
 */
async function tryOnce(
  ctx: ServiceContext,
  state: NameState,
  queued: QueuedAcquire,
  isHolder: boolean,
): Promise<Lease> {
  if (state.waits?.size && !isHolder) {
    const queue = ctx.backend.capabilities.fairQueue ? undefined : localLoop(ctx);
    throw lockHeld(state.name, queue?.holderMs(state.name));
  }
  const result = await attempt(ctx, state, queued);
  if (result.granted) return toLease(result.grant, queued.leaseKey, queued.request);
  throw lockHeld(state.name, result.ttlRemainingMs, result.lockDelayRemainingMs);
}

async function release(ctx: ServiceContext, request: ReleaseRequest): Promise<void> {
  const name = ctx.checkName(request.name);
  const token = checkToken(request.token);
  const proof = proofOf(ctx, name, token, request.leaseKey);
  assertOpen(ctx);
  // No proof: NOT_HOLDER without asking the backend, the same answer a wrong key gets.
  if (proof === null) throw notHolderError(name, token);
  const { keyHash } = proof;
  const released = await ctx.calls.bounded(
    'release',
    'release',
    () => ctx.backend.release({ name, token, keyHash }),
    undefined,
    undefined,
    request.aroundBackendCall,
  );
  const state = ctx.names.get(name);
  const tracked = state ? leaseOf(state, token) : undefined;
  const view = state ? viewOf(state, token) : undefined;
  if (released && state && view) {
    // Watchers hear it now; the backend's own event about it is then old news.
    ctx.onEvent(state, { name, type: 'released', token, mode: modeOfView(view) });
  } else if (state && tracked && (released || tracked.keyHash === keyHash)) {
    // Refused with the lease's own key: it has ended. Refused with another key: it is still
    // the holder's, who must go on hearing of it (lock.lost) and using it without a key.
    untrack(ctx, state, token);
    dropIfIdle(ctx, state);
  }
  if (!released) throw notHolderError(name, token);
  ctx.notify('released', name, token);
}

async function extend(ctx: ServiceContext, options: ExtendOptions): Promise<Lease> {
  const name = ctx.checkName(options.name);
  const token = checkToken(options.token);
  const ttlMs = validateTtl(options.ttlMs, ctx.limits);
  const proof = proofOf(ctx, name, token, options.leaseKey);
  assertOpen(ctx);
  if (proof === null) throw notHolderError(name, token);
  const { leaseKey, keyHash } = proof;
  const state = openName(ctx, name);
  state.busy += 1;
  try {
    const startedAt = ctx.clock.now();
    const grant = await ctx.calls.bounded(
      'extend',
      'extend',
      () => ctx.backend.extend({ name, token, ttlMs, keyHash }),
      undefined,
      undefined,
      options.aroundBackendCall,
    );
    if (!grant) throw notHolderError(name, token);
    if (ctx.clock.now() - startedAt >= grant.ttlMs) throw ranOutError();
    const tracked = leaseOf(state, token);
    const spec = tracked ? specOfLease(tracked) : await specOf(ctx, name, token);
    track(ctx, state, grant, proof, spec, startedAt, options);
    return reportGrant(ctx, toLease(grant, leaseKey, spec), 'extended', 0);
  } finally {
    state.busy -= 1;
    dropIfIdle(ctx, state);
  }
}

/**
 * The mode and limit of a lease extended here that this service does not follow (granted
 * through another instance): the backend's holders say. Exclusive on a backend without shared
 * modes, and when the backend no longer lists the lease.
 */
async function specOf(ctx: ServiceContext, name: string, token: bigint): Promise<LeaseSpec> {
  const exclusive: LeaseSpec = { mode: 'exclusive', limit: 1 };
  if (!ctx.backend.capabilities.sharedModes) return exclusive;
  const current = normalState(
    await ctx.calls.bounded('inspect', 'inspect', () => ctx.backend.inspect(name)),
  );
  if (current?.mode !== 'shared' || !current.holders?.some((holder) => holder.token === token)) {
    return exclusive;
  }
  return { mode: 'shared', limit: current.limit ?? ctx.limits.maxHolders };
}

/** A backend's answer with `mode` and `holders` always filled (an adapter may leave them out). */
function normalState(current: LockState | null): LockState | null {
  if (!current || (current.mode !== undefined && current.holders !== undefined)) return current;
  return Object.assign({}, current, {
    mode: current.mode ?? 'exclusive',
    holders: holdersOf(current),
  });
}

async function get(ctx: ServiceContext, name: string): Promise<LockState | null> {
  ctx.checkName(name);
  assertOpen(ctx);
  return normalState(
    await ctx.calls.bounded('inspect', 'inspect', () => ctx.backend.inspect(name)),
  );
}

async function checkLease(ctx: ServiceContext, name: string, token: bigint): Promise<boolean> {
  checkToken(token);
  const current = await get(ctx, name);
  return (
    current?.holders?.some((holder) => holder.token === token && holder.ttlRemainingMs > 0) ?? false
  );
}

async function countWaiters(
  ctx: ServiceContext,
  name: string,
): Promise<{ waiters: number; waitersScope: WaitersScope }> {
  ctx.checkName(name);
  assertOpen(ctx);
  const queue = backendQueueOf(ctx.backend);
  if (!queue) {
    const state = ctx.names.get(name);
    return { waiters: state ? waitersOf(state) : 0, waitersScope: 'server' };
  }
  const waiters = await ctx.calls.bounded('inspect', 'inspect', () => queue.count!(name));
  return { waiters, waitersScope: 'backend' };
}

async function lockDelayOf(ctx: ServiceContext, name: string): Promise<number> {
  ctx.checkName(name);
  assertOpen(ctx);
  const { backend } = ctx;
  if (!backend.capabilities.lockDelay || !backend.lockDelayOf) return 0;
  return ctx.calls.bounded('inspect', 'inspect', () => backend.lockDelayOf!(name));
}

/**
 * Ends every holder of `name`: the backend's revoke, else (an operator's action) a release of
 * each holder `inspect` lists by its token alone. Each holder followed here hears it.
 */
async function revoke(ctx: ServiceContext, name: string): Promise<LockState | null> {
  ctx.checkName(name);
  assertOpen(ctx);
  const { backend, calls } = ctx;
  const current = normalState(
    await calls.bounded('inspect', 'inspect', () => backend.inspect(name)),
  );
  if (!current) return null;
  let ended = current.holders!;
  // The backend's events about these ends may come before the answer, and a release's event
  // untracks a lease without telling its holder: who held what here is taken before.
  const before = ctx.names.get(name);
  const ours = before ? ended.map(({ token }) => leaseOf(before, token)) : [];
  if (backend.revoke) {
    if (!(await calls.bounded('revoke', 'revoke', () => backend.revoke!(name)))) return null;
  } else {
    const released = await Promise.all(
      ended.map(({ token }) =>
        calls.bounded('release', 'release', () => backend.release({ name, token })),
      ),
    );
    ended = ended.filter((_, index) => released[index]);
    if (ended.length === 0) return null;
  }
  for (const [index, { token }] of current.holders!.entries()) {
    if (!ended.some((holder) => holder.token === token)) continue;
    const state = ctx.names.get(name);
    if (state && viewOf(state, token)) {
      ctx.onEvent(state, { name, type: 'revoked', token, mode: current.mode });
    } else if (state && leaseOf(state, token)) {
      lose(ctx, state, token, 'revoked');
      dropIfIdle(ctx, state);
    } else {
      const lease = ours[index];
      // Untracked by the release's own event, which does not say it was a revocation.
      if (lease && !backend.revoke) tellLost(ctx, name, lease, 'revoked');
    }
  }
  return current;
}

function watch(
  ctx: ServiceContext,
  name: string,
  listener: (change: LockChange) => void,
): () => void {
  ctx.checkName(name);
  assertOpen(ctx);
  const state = openName(ctx, name);
  const first = !followsEnd(ctx, state);
  state.watchers ??= new Set();
  // Before the first check's inspect: every change after it must reach this service.
  if (state.watchers.size === 0) state.unfollow = ctx.backend.followChanges?.(name);
  state.watchers.add(listener);
  // From now on this service follows the holder: learn who it is and when its lease ends.
  if (first) {
    if (state.holders !== undefined) scheduleCheck(ctx, state);
    else void check(ctx, state, 'unknown');
  }
  return () => {
    if (!state.watchers?.delete(listener)) return;
    if (state.watchers.size === 0) unfollow(state);
    if (!followsEnd(ctx, state)) cancelCheck(state);
    dropIfIdle(ctx, state);
  };
}

function unfollow(state: NameState): void {
  state.unfollow?.();
  state.unfollow = undefined;
}

async function close(ctx: ServiceContext): Promise<void> {
  ctx.closed = true;
  const cancelled = cancelledError('the server is shutting down');
  for (const state of [...ctx.names.values()]) {
    for (const controller of state.waits ?? []) controller.abort(cancelled);
    untrackAll(ctx, state);
    forgetHolders(state);
    unfollow(state);
    state.watchers = undefined;
    ctx.names.delete(state.name);
    state.unsubscribe();
  }
}
