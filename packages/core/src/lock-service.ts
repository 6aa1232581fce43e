import type {
  AcquireRequest,
  AcquireResult,
  Grant,
  LockBackend,
  LockEvent,
  LockState,
} from './backend.js';
import { type Clock, systemClock, type Timer } from './clock.js';
import { createDeadlineQueue } from './deadline-queue.js';
import { DlmError, isDlmError } from './errors.js';
import { MAX_TOKEN } from './fencing.js';
import { createLeaseKey, hashLeaseKey } from './lease-key.js';
import { type BackendOperation, type LockObserver, observerNotifier } from './observer.js';
import {
  DEFAULT_LIMITS,
  type Limits,
  validateLeaseKey,
  validateName,
  validateOwner,
  validateTtl,
  validateWait,
} from './validation.js';

/** A lease granted by the service. `ttlMs` is what the backend granted (≥ the request). */
export interface Lease {
  name: string;
  owner: string;
  token: bigint;
  ttlMs: number;
  /**
   * The secret that proves holding (see `AcquireOptions.leaseKey`). Only the acquire's caller
   * gets it; never show it in logs, `get`, `watch` or anything a non-holder sees.
   */
  leaseKey: string;
}

export interface LostEvent {
  name: string;
  token: bigint;
  reason: 'expired' | 'revoked';
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
  /** While held, the lease left, when core knows it. */
  ttlRemainingMs?: number;
}

export interface AcquireOptions {
  name: string;
  owner: string;
  ttlMs: number;
  /** 0 (the default) is a try-lock; otherwise wait up to this long, first come first served. */
  waitMs?: number;
  /** Ends a wait early with CANCELLED. */
  signal?: AbortSignal;
  /** Called once when the granted lease ends other than by a release (expiry, revocation). */
  onLost?: (event: LostEvent) => void;
  /**
   * The lease's secret (22-128 characters of `[A-Za-z0-9_-]`); releases and extends present it,
   * on any service sharing the backend. Absent: the key of the lease this service already
   * holds for `owner`, if any, else a fresh random one. The same owner while held gets the same
   * lease back only with the same key. A server that serves many clients through one service
   * must always pass it (each client's own, or one it keeps per session): the fallbacks below
   * treat the service's caller as the holder.
   */
  leaseKey?: string;
}

/**
 * A release's or extend's proof of holding: the lease's key, or none for a lease this service
 * granted and still tracks (a caller in the same process). Anything else is NOT_HOLDER.
 */
export interface ReleaseRequest {
  name: string;
  token: bigint;
  leaseKey?: string;
}

export interface ExtendOptions {
  name: string;
  token: bigint;
  ttlMs: number;
  /** See `ReleaseRequest.leaseKey`. */
  leaseKey?: string;
  /** Replaces the lease's `onLost` (a holder that reconnected elsewhere extends its lease). */
  onLost?: (event: LostEvent) => void;
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
  release(request: ReleaseRequest): Promise<void>;
  extend(options: ExtendOptions): Promise<Lease>;
  get(name: string): Promise<LockState | null>;
  /** Ends whatever lease holds `name`; its holder is told `lock.lost` (revoked). */
  revoke(name: string): Promise<LockState | null>;
  watch(name: string, listener: (change: LockChange) => void): () => void;
  /**
   * Whether the lease `token` of `name`, granted or extended through this service, is still
   * followed as held: false once its end was seen, even when that end overtook the reply.
   */
  holds(name: string, token: bigint): boolean;
  /** Waiters queued on this service for `name`. */
  waiters(name: string): number;
  /** Ends every wait with CANCELLED and stops all timers. Does not close the backend. */
  close(): Promise<void>;
}

interface Waiter {
  request: AcquireRequest & { keyHash: string };
  leaseKey: string;
  onLost: ((event: LostEvent) => void) | undefined;
  resolve: (lease: Lease) => void;
  reject: (error: DlmError) => void;
  settled: boolean;
  deadlineTimer: Timer;
  detachSignal: () => void;
  /** The holder's remaining lease, last time this waiter asked. */
  ttlRemainingMs: number | undefined;
}

/** A lease granted through this service, whose holder is told when it ends (`onLost`). */
interface TrackedLease {
  token: bigint;
  owner: string;
  /** Kept so that the service's own caller may release, extend or re-acquire without it. */
  leaseKey: string;
  keyHash: string;
  onLost: ((event: LostEvent) => void) | undefined;
}

/**
 * The lease this service believes holds a name, for the names whose end it must see for
 * itself: watched names, and leases granted here on a backend without expiry events. At its
 * deadline the backend is asked, and an end it did not report is reported from here.
 */
interface HolderView {
  token: bigint;
  owner: string | undefined;
  /** On the service's clock; undefined until a grant or `inspect` told it. */
  expiresAt: number | undefined;
  /**
   * `expiresAt` is the backend's own count (from `inspect`), not the holder's earlier local one
   * (a grant here counts from the request's start, before the backend's lease began).
   */
  counted: boolean;
  /** Watchers were told of this grant (by the backend's event or by a check). */
  announced: boolean;
}

/**
 * Why the backend is asked about a name's holder: an end it reported without saying whose, or
 * `unknown` (a deadline passed, a watch started, a grant's lease left is not known yet).
 */
type EndType = 'expired' | 'released' | 'revoked' | 'unknown';

/** Everything the service keeps for one lock name; dropped when nothing needs it. */
interface NameState {
  name: string;
  queue: Waiter[];
  lease: TrackedLease | undefined;
  holder: HolderView | undefined;
  /** The last lease whose end watchers were told of: a second report of it is dropped. */
  lastEnded: bigint | undefined;
  /** What watchers were last told: held (true), free (false), or nothing yet. */
  told: boolean | undefined;
  /** When to ask the backend about the holder (its deadline, or a retry). */
  checkTimer: Timer | undefined;
  checking: boolean;
  /** News arrived while a check was in flight: its answer is stale, ask again. */
  checkAgain: boolean;
  watchers: Set<(change: LockChange) => void>;
  unsubscribe: () => void;
  pumping: boolean;
  /** Calls in flight for this name (acquire/extend): the state must outlive them. */
  busy: number;
  /** Waits this service has parked in the backend's own queue (`acquireQueued`). */
  queuedInBackend: Set<AbortController>;
  /** A backend event arrived while the head's attempt was in flight: ask again. */
  again: boolean;
  retryTimer: Timer | undefined;
}

/**
 * Builds waits, FIFO fairness, validation and lock-lost detection over any backend.
 *
 * @example
 * const service = createLockService({ backend: await embeddedBackend() });
 * const lease = await service.acquire({ name: 'jobs', owner: 'worker-1', ttlMs: 10_000, waitMs: 5_000 });
 * await service.release({ name: 'jobs', token: lease.token });
 */
export function createLockService(options: LockServiceOptions): LockService {
  const { backend } = options;
  const clock = options.clock ?? systemClock;
  const limits: Limits = { ...DEFAULT_LIMITS, ...options.limits };
  limits.minTtlMs = Math.max(limits.minTtlMs, backend.capabilities.minTtlMs);
  const maxWaiters = options.maxWaitersPerName ?? 10_000;
  const backendTimeoutMs = options.backendTimeoutMs ?? 10_000;
  const unknownTtlRetryMs = options.unknownTtlRetryMs ?? 1_000;
  // With expiry events the backend tells us when a lease ends; otherwise a timer per tracked
  // lease asks the backend at the moment the lease would run out.
  const leaseTimers = !backend.capabilities.expiryEvents;
  // Where the backend reports expiries, the check at a watched lease's end is only a backstop
  // (a lost event, an extend through another instance): it waits for the backend's event first.
  const checkDelayMs = leaseTimers ? 1 : 250;
  // A check that finds the deadline later by more than this reports the lease `extended`.
  const EXTENDED_BY_MS = 250;
  // How long a lease found gone before its deadline waits for the backend's event about it.
  const EVENT_GRACE_MS = 250;
  const names = new Map<string, NameState>();
  const notify = observerNotifier(options.observer);
  let closed = false;

  function assertOpen(): void {
    if (closed) throw new DlmError('UNAVAILABLE', 'the lock service is shutting down');
  }

  function stateOf(name: string): NameState {
    let state = names.get(name);
    if (state) return state;
    const created: NameState = {
      name,
      queue: [],
      lease: undefined,
      holder: undefined,
      lastEnded: undefined,
      told: undefined,
      checkTimer: undefined,
      checking: false,
      checkAgain: false,
      watchers: new Set(),
      unsubscribe: () => {},
      pumping: false,
      busy: 0,
      queuedInBackend: new Set(),
      again: false,
      retryTimer: undefined,
    };
    state = created;
    names.set(name, created);
    created.unsubscribe = backend.watch(name, (event) => onBackendEvent(created, event));
    return created;
  }

  function dropIfIdle(state: NameState): void {
    if (state.queue.length || state.lease || state.watchers.size || state.pumping || state.busy)
      return;
    if (names.get(state.name) !== state) return;
    names.delete(state.name);
    state.retryTimer?.cancel();
    state.checkTimer?.cancel();
    state.unsubscribe();
  }

  // The backstop of calls with the default timeout: their deadlines come in the order the calls
  // start, so one queue and one timer serve them all (a timer per call was a measurable share of
  // the server's CPU).
  const backstops = createDeadlineQueue(clock, backendTimeoutMs);

  /** One backend call, timed for the observer whether it succeeds or fails. */
  function callBackend<T>(operation: BackendOperation, call: () => Promise<T>): Promise<T> {
    const startedAt = clock.now();
    return call().then(
      (value) => {
        notify('backendCall', operation, clock.now() - startedAt);
        return value;
      },
      (error: unknown) => {
        notify('backendCall', operation, clock.now() - startedAt, error);
        throw error;
      },
    );
  }

  /** Races a backend call against the backstop timeout. */
  function bounded<T>(
    what: string,
    operation: BackendOperation,
    call: () => Promise<T>,
    onLateResult?: (value: T) => void,
    timeoutMs = backendTimeoutMs,
  ) {
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const expire = () => {
        if (done) return;
        done = true;
        reject(
          new DlmError('UNAVAILABLE', `${what}: the backend did not answer in ${timeoutMs} ms`, {
            indeterminate: true,
          }),
        );
      };
      let cancel: () => void;
      if (timeoutMs === backendTimeoutMs) {
        cancel = backstops.add(expire);
      } else {
        const timer = clock.setTimer(expire, timeoutMs);
        cancel = () => timer.cancel();
      }
      callBackend(operation, call).then(
        (value) => {
          cancel();
          if (done) onLateResult?.(value);
          else {
            done = true;
            resolve(value);
          }
        },
        (error: unknown) => {
          cancel();
          if (!done) {
            done = true;
            reject(error);
          }
        },
      );
    });
  }

  function releaseQuietly(grant: Grant, keyHash: string): void {
    callBackend('release', () =>
      backend.release({ name: grant.name, token: grant.token, keyHash }),
    ).catch(() => {});
  }

  /** One tryAcquire, checked so that no grant is reported already expired (S5). */
  async function attempt(
    state: NameState,
    request: AcquireRequest & { keyHash: string },
    leaseKey: string,
    onLost: ((event: LostEvent) => void) | undefined,
  ): Promise<AcquireResult> {
    const startedAt = clock.now();
    const result = await bounded(
      'acquire',
      'tryAcquire',
      () => backend.tryAcquire(request),
      (late) => {
        // The caller was already told UNAVAILABLE: a grant nobody will use must not linger.
        if (late.granted) releaseQuietly(late.grant, request.keyHash);
      },
    );
    if (!result.granted) return result;
    if (clock.now() - startedAt >= result.grant.ttlMs) {
      releaseQuietly(result.grant, request.keyHash);
      throw new DlmError(
        'UNAVAILABLE',
        'the backend answered after the lease had already run out',
        {
          indeterminate: true,
        },
      );
    }
    track(state, result.grant, leaseKey, startedAt, onLost);
    return result;
  }

  function toLease(grant: Grant, leaseKey: string): Lease {
    return {
      name: grant.name,
      owner: grant.owner,
      token: grant.token,
      ttlMs: grant.ttlMs,
      leaseKey,
    };
  }

  // ---- lock-lost detection and the holder's end --------------------------------------

  function track(
    state: NameState,
    grant: Grant,
    leaseKey: string,
    startedAt: number,
    onLost: ((event: LostEvent) => void) | undefined,
  ): void {
    // This lease's end overtook the reply (a release racing an idempotent re-acquire of the
    // same lease): it is over already, nothing to follow.
    if (grant.token === state.lastEnded) return;
    const previous = state.lease;
    if (previous && previous.token !== grant.token) lose(state, 'expired');
    const lease: TrackedLease = state.lease ?? {
      token: grant.token,
      owner: grant.owner,
      leaseKey,
      keyHash: hashLeaseKey(leaseKey),
      onLost: undefined,
    };
    lease.onLost = onLost ?? lease.onLost;
    state.lease = lease;
    see(state, grant.token, grant.owner, startedAt + grant.ttlMs);
  }

  function untrack(state: NameState): TrackedLease | undefined {
    const lease = state.lease;
    if (!lease) return undefined;
    state.lease = undefined;
    if (!checksEnd(state)) cancelCheck(state);
    return lease;
  }

  function lose(state: NameState, reason: LostEvent['reason']): void {
    const lease = untrack(state);
    if (!lease) return;
    const event: LostEvent = { name: state.name, token: lease.token, reason };
    notify('lost', event);
    if (!lease.onLost) return;
    try {
      lease.onLost(event);
    } catch {
      // A listener's failure must not break the service.
    }
  }

  /**
   * Whether this service must see the current lease end for itself: someone watches the name,
   * or a holder here waits to be told it lost a lease on a backend without expiry events.
   */
  function checksEnd(state: NameState): boolean {
    return state.watchers.size > 0 || (leaseTimers && state.lease !== undefined);
  }

  /** Records what is known of the current holder. Undefined when `token` is old news. */
  function see(
    state: NameState,
    token: bigint,
    owner: string | undefined,
    expiresAt: number | undefined,
  ): HolderView | undefined {
    let view = state.holder;
    if (view && token < view.token) return undefined;
    if (!view && state.lastEnded !== undefined && token <= state.lastEnded) return undefined;
    if (!view || view.token !== token) {
      view = { token, owner, expiresAt: undefined, counted: false, announced: false };
      state.holder = view;
      if (state.checking) state.checkAgain = true;
    }
    view.owner = owner ?? view.owner;
    if (expiresAt !== undefined) {
      view.expiresAt = expiresAt;
      view.counted = false;
    }
    scheduleCheck(state);
    return view;
  }

  function forgetHolder(state: NameState): void {
    state.holder = undefined;
    if (state.checking) state.checkAgain = true;
    cancelCheck(state);
  }

  function cancelCheck(state: NameState): void {
    state.checkTimer?.cancel();
    state.checkTimer = undefined;
  }

  /** Asks the backend at the holder's deadline (at once when the deadline is not known yet). */
  function scheduleCheck(state: NameState): void {
    cancelCheck(state);
    const view = state.holder;
    if (!view || closed || !checksEnd(state)) return;
    if (view.expiresAt === undefined) {
      void check(state, 'unknown');
      return;
    }
    state.checkTimer = clock.setTimer(
      () => {
        state.checkTimer = undefined;
        void check(state, 'unknown');
      },
      view.expiresAt - clock.now() + checkDelayMs,
    );
  }

  /**
   * Asks the backend who holds the name and tells watchers what changed: a lease that is gone
   * ends with `endType` (the backend did not report it, or reported an end without saying
   * whose), one extended elsewhere moves its deadline, a holder not known yet is adopted.
   */
  async function check(state: NameState, endType: EndType) {
    if (state.checking) {
      state.checkAgain = true;
      return;
    }
    state.checking = true;
    state.checkAgain = false;
    cancelCheck(state);
    let current: LockState | null;
    try {
      current = await bounded('inspect', 'inspect', () => backend.inspect(state.name));
    } catch {
      state.checking = false;
      // Cannot tell right now (a holder here has its own local deadline): ask again soon.
      if (names.get(state.name) === state && checksEnd(state) && !closed) {
        state.checkTimer = clock.setTimer(() => {
          state.checkTimer = undefined;
          void check(state, endType);
        }, 1_000);
      }
      return;
    }
    state.checking = false;
    if (names.get(state.name) !== state || closed) return;
    if (state.checkAgain) {
      // Events arrived while the answer was on its way: it may be older than they are.
      void check(state, endType);
      return;
    }
    reconcile(state, current, endType);
  }

  function reconcile(state: NameState, current: LockState | null, endType: EndType): void {
    const view = state.holder;
    if (view && current && current.token <= view.token) {
      if (current.token < view.token) {
        // An answer older than what the events said: ask again a little later.
        state.checkTimer = clock.setTimer(() => {
          state.checkTimer = undefined;
          void check(state, endType);
        }, 1_000);
        return;
      }
      const expiresAt = clock.now() + current.ttlRemainingMs;
      // Only a deadline the backend counted before can show an extension: its lease ends a
      // little after a local grant's count, without anyone extending it.
      const longer =
        view.expiresAt === undefined ||
        (view.counted && expiresAt - view.expiresAt > EXTENDED_BY_MS);
      view.expiresAt = expiresAt;
      view.counted = true;
      view.owner ??= current.owner;
      if (!view.announced && state.told === false) {
        view.announced = true;
        announce(state, heldChange(state, 'acquired', view));
      } else if (longer && view.announced) {
        announce(state, heldChange(state, 'extended', view));
      }
      scheduleCheck(state);
      return;
    }
    if (view) {
      if (endType === 'unknown' && (view.expiresAt === undefined || clock.now() < view.expiresAt)) {
        // Gone before its deadline: released or revoked, and the backend's event about it,
        // which says which, is on its way. Only if none comes is it reported from here.
        view.expiresAt = clock.now();
        view.counted = false;
        state.checkTimer = clock.setTimer(() => {
          state.checkTimer = undefined;
          void check(state, 'unknown');
        }, EVENT_GRACE_MS);
        return;
      }
      // The lease ended and the backend did not say so (no expiry events, or a lost event),
      // or said so without saying whose. A lease held through here that was not released here
      // is reported lost: an end without a token may be anyone's (on Redlock, a failed
      // attempt's clean-up), and a holder must never miss its lock.lost.
      const type =
        endType === 'unknown' || (endType === 'released' && state.lease?.token === view.token)
          ? 'expired'
          : endType;
      onBackendEvent(state, {
        name: state.name,
        type,
        token: view.token,
        ...(view.owner === undefined ? {} : { owner: view.owner }),
      });
      if (names.get(state.name) !== state) return;
    } else if (!current && endType !== 'unknown' && state.told !== false) {
      announce(state, { name: state.name, held: false, type: endType });
    }
    if (current && !state.holder) {
      const adopted = see(
        state,
        current.token,
        current.owner,
        clock.now() + current.ttlRemainingMs,
      );
      if (adopted) adopted.counted = true;
      // Watchers told it was free hear that it is held again. A new watcher reads the state
      // itself, but the backend's event about this grant may still be on its way: let it pass.
      if (adopted && state.told === false) {
        adopted.announced = true;
        announce(state, heldChange(state, 'acquired', adopted));
      }
    }
  }

  function heldChange(
    state: NameState,
    type: 'acquired' | 'extended',
    view: HolderView,
  ): LockChange {
    return {
      name: state.name,
      held: true,
      type,
      ...(view.owner === undefined ? {} : { owner: view.owner }),
      token: view.token,
      ...(view.expiresAt === undefined
        ? {}
        : { ttlRemainingMs: Math.max(0, Math.ceil(view.expiresAt - clock.now())) }),
    };
  }

  function announce(state: NameState, change: LockChange): void {
    state.told = change.held;
    for (const watcher of state.watchers) {
      try {
        watcher(change);
      } catch {}
    }
  }

  /** Brings the holder view in line with a backend event: the change to tell, if any. */
  function holderChange(state: NameState, event: LockEvent): LockChange | undefined {
    const { token } = event;
    const owner = event.owner === undefined ? {} : { owner: event.owner };
    if (event.type === 'acquired') {
      if (token === undefined) {
        // Whose grant? Ask, when this service follows the name's holder.
        if (checksEnd(state)) void check(state, 'unknown');
        return { name: state.name, held: true, type: 'acquired', ...owner };
      }
      const view = see(state, token, event.owner, undefined);
      if (!view || view.announced) return undefined;
      view.announced = true;
      return heldChange(state, 'acquired', view);
    }
    const view = state.holder;
    if (token === undefined) {
      // The backend cannot say which lease ended (a wake-up after a reconnect; on Redlock, a
      // failed attempt's clean-up looks the same): where this service follows the holder, the
      // backend is asked, and watchers hear what it says.
      if (checksEnd(state)) {
        void check(state, event.type);
        return undefined;
      }
      return { name: state.name, held: false, type: event.type };
    }
    if (token === state.lastEnded || (view && token < view.token)) return undefined;
    state.lastEnded = token;
    if (view?.token === token) forgetHolder(state);
    return { name: state.name, held: false, type: event.type, token, ...owner };
  }

  function onBackendEvent(state: NameState, event: LockEvent): void {
    if (names.get(state.name) !== state) return;
    const lease = state.lease;
    if (lease) {
      if (event.token === lease.token) {
        if (event.type === 'expired' || event.type === 'revoked') lose(state, event.type);
        else if (event.type === 'released') untrack(state);
      } else if (
        event.type === 'acquired' &&
        event.token !== undefined &&
        event.token > lease.token
      ) {
        // Somebody else holds it now, so our lease ended without us seeing it end. An older
        // grant's event may arrive late (events and replies travel apart): ignore those.
        lose(state, 'expired');
      }
    }
    const change = holderChange(state, event);
    if (change) announce(state, change);
    if (event.type !== 'acquired' && state.queue.length) void pump(state);
    dropIfIdle(state);
  }

  // ---- waiting -------------------------------------------------------------------------

  function waitersChanged(state: NameState): void {
    notify('waiting', state.name, state.queue.length + state.queuedInBackend.size);
  }

  /**
   * Reports a lease an acquire or extend returns. Only one still followed as held: a lease whose
   * end overtook the reply (its release, its expiry) was never held here as far as anyone knows.
   */
  function reportGrant(lease: Lease, event: 'granted' | 'extended', waitedMs: number): Lease {
    if (names.get(lease.name)?.lease?.token !== lease.token) return lease;
    if (event === 'granted') notify('granted', lease, waitedMs);
    else notify('extended', lease);
    return lease;
  }

  /** Ends a wait with a lease or an error (exactly one of them), once. */
  function settle(state: NameState, waiter: Waiter, lease: Lease | null, error?: DlmError): void {
    if (waiter.settled) return;
    waiter.settled = true;
    waiter.deadlineTimer.cancel();
    waiter.detachSignal();
    const index = state.queue.indexOf(waiter);
    if (index >= 0) {
      state.queue.splice(index, 1);
      waitersChanged(state);
    }
    if (lease) waiter.resolve(lease);
    else waiter.reject(error!);
  }

  function lockHeld(name: string, ttlRemainingMs: number | undefined): DlmError {
    return new DlmError(
      'LOCK_HELD',
      `lock ${JSON.stringify(name)} is held by another owner`,
      ttlRemainingMs === undefined
        ? {}
        : { ttlRemainingMs: Math.max(0, Math.ceil(ttlRemainingMs)) },
    );
  }

  /**
   * Serves one name's queue: only the head asks the backend (no herd). When the lock is held,
   * the head sleeps until a backend event or the holder's remaining lease runs out.
   */
  async function pump(state: NameState): Promise<void> {
    if (state.pumping) {
      state.again = true;
      return;
    }
    state.pumping = true;
    try {
      for (;;) {
        state.again = false;
        state.retryTimer?.cancel();
        state.retryTimer = undefined;
        const head = state.queue[0];
        if (!head || closed) break;
        let result: AcquireResult;
        try {
          result = await attempt(state, head.request, head.leaseKey, head.onLost);
        } catch (error) {
          settle(state, head, null, asDlmError(error));
          continue;
        }
        if (result.granted) {
          if (head.settled) {
            // The wait ended (deadline, abort, closed connection) while the grant was in flight:
            // nobody will use this lease, so give it back at once.
            if (state.lease?.token === result.grant.token) untrack(state);
            releaseQuietly(result.grant, head.request.keyHash);
            continue;
          }
          settle(state, head, toLease(result.grant, head.leaseKey));
          continue;
        }
        head.ttlRemainingMs = result.ttlRemainingMs;
        if (state.again) continue;
        const sleepMs =
          result.ttlRemainingMs === undefined
            ? unknownTtlRetryMs
            : Math.max(1, result.ttlRemainingMs) + 1;
        state.retryTimer = clock.setTimer(() => void pump(state), sleepMs);
        break;
      }
    } finally {
      state.pumping = false;
      dropIfIdle(state);
    }
  }

  function enqueue(
    state: NameState,
    options: AcquireOptions,
    request: AcquireRequest & { keyHash: string },
    leaseKey: string,
    waitMs: number,
  ) {
    if (state.queue.length >= maxWaiters) {
      throw new DlmError(
        'LIMIT_EXCEEDED',
        `too many waiters for lock ${JSON.stringify(request.name)}`,
      );
    }
    return new Promise<Lease>((resolve, reject) => {
      const waiter: Waiter = {
        request,
        leaseKey,
        onLost: options.onLost,
        resolve,
        reject,
        settled: false,
        deadlineTimer: clock.setTimer(
          () => settle(state, waiter, null, lockHeld(request.name, waiter.ttlRemainingMs)),
          waitMs,
        ),
        detachSignal: () => {},
        ttlRemainingMs: undefined,
      };
      const { signal } = options;
      if (signal) {
        const onAbort = () =>
          settle(state, waiter, null, new DlmError('CANCELLED', 'the wait was cancelled'));
        signal.addEventListener('abort', onAbort, { once: true });
        waiter.detachSignal = () => signal.removeEventListener('abort', onAbort);
      }
      state.queue.push(waiter);
      waitersChanged(state);
      void pump(state);
    });
  }

  /**
   * A wait in the backend's own queue (fair across servers). The deadline and the caller's
   * signal abort it; the adapter dequeues and answers `granted: false`.
   */
  async function waitInBackend(
    state: NameState,
    options: AcquireOptions,
    request: AcquireRequest & { keyHash: string },
    leaseKey: string,
    waitMs: number,
  ): Promise<Lease> {
    if (state.queuedInBackend.size >= maxWaiters) {
      throw new DlmError(
        'LIMIT_EXCEEDED',
        `too many waiters for lock ${JSON.stringify(request.name)}`,
      );
    }
    const controller = new AbortController();
    const cancelled = new DlmError('CANCELLED', 'the wait was cancelled');
    const deadline = clock.setTimer(
      () => controller.abort(lockHeld(request.name, undefined)),
      waitMs,
    );
    const onAbort = () => controller.abort(cancelled);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    state.queuedInBackend.add(controller);
    waitersChanged(state);
    try {
      // The backend call may run as long as the wait; the backstop counts from the deadline.
      const result = await bounded(
        'acquire',
        'acquireQueued',
        () => backend.acquireQueued!({ ...request, signal: controller.signal }),
        (late) => {
          if (late.granted) releaseQuietly(late.grant, request.keyHash);
        },
        waitMs + backendTimeoutMs,
      );
      if (result.granted && controller.signal.aborted) {
        // Granted just as the wait ended: nobody will use it.
        releaseQuietly(result.grant, request.keyHash);
      }
      if (!result.granted || controller.signal.aborted) {
        const reason: unknown = controller.signal.reason;
        if (isDlmError(reason) && reason.code === 'LOCK_HELD' && !result.granted) {
          throw lockHeld(request.name, result.ttlRemainingMs);
        }
        throw isDlmError(reason) ? reason : lockHeld(request.name, undefined);
      }
      track(state, result.grant, leaseKey, clock.now(), options.onLost);
      return toLease(result.grant, leaseKey);
    } finally {
      deadline.cancel();
      options.signal?.removeEventListener('abort', onAbort);
      state.queuedInBackend.delete(controller);
      waitersChanged(state);
    }
  }

  function checkToken(token: bigint): bigint {
    if (typeof token !== 'bigint' || token < 1n || token > MAX_TOKEN) {
      throw new DlmError('INVALID_PARAMS', 'token must be an integer in [1, 2^63-1]', {
        field: 'token',
      });
    }
    return token;
  }

  /**
   * The key hash a release or extend presents: from the caller's key, or, without one, from the
   * lease this service granted with `token` (its own caller). Null: no proof at all.
   */
  function proofOf(
    name: string,
    token: bigint,
    leaseKey: unknown,
  ): { leaseKey: string; keyHash: string } | null {
    if (leaseKey !== undefined) {
      const key = validateLeaseKey(leaseKey);
      return { leaseKey: key, keyHash: hashLeaseKey(key) };
    }
    const tracked = names.get(name)?.lease;
    return tracked?.token === token ? tracked : null;
  }

  return {
    backend,
    limits,

    async acquire(options) {
      const name = validateName(options.name, limits);
      const owner = validateOwner(options.owner, limits);
      const ttlMs = validateTtl(options.ttlMs, limits);
      const waitMs = validateWait(options.waitMs, limits);
      const givenKey =
        options.leaseKey === undefined ? undefined : validateLeaseKey(options.leaseKey);
      assertOpen();
      if (options.signal?.aborted) throw new DlmError('CANCELLED', 'the wait was cancelled');
      const state = stateOf(name);
      const tracked = state.lease?.owner === owner ? state.lease : undefined;
      const leaseKey = givenKey ?? tracked?.leaseKey ?? createLeaseKey();
      const keyHash =
        tracked && leaseKey === tracked.leaseKey ? tracked.keyHash : hashLeaseKey(leaseKey);
      const request = { name, owner, ttlMs, keyHash };
      const startedAt = clock.now();
      state.busy += 1;
      try {
        const isHolder = tracked?.keyHash === keyHash;
        if (waitMs > 0 && !isHolder) {
          const lease =
            backend.capabilities.fairQueue && backend.acquireQueued
              ? await waitInBackend(state, options, request, leaseKey, waitMs)
              : await enqueue(state, options, request, leaseKey, waitMs);
          return reportGrant(lease, 'granted', clock.now() - startedAt);
        }
        // A try-lock does not jump the queue: while others wait here, only the holder's
        // idempotent re-acquire goes to the backend.
        if ((state.queue.length || state.queuedInBackend.size) && !isHolder) {
          throw lockHeld(name, state.queue[0]?.ttlRemainingMs);
        }
        const result = await attempt(state, request, leaseKey, options.onLost);
        if (result.granted) return reportGrant(toLease(result.grant, leaseKey), 'granted', 0);
        throw lockHeld(name, result.ttlRemainingMs);
      } finally {
        state.busy -= 1;
        dropIfIdle(state);
      }
    },

    async release(request) {
      const name = validateName(request.name, limits);
      const token = checkToken(request.token);
      const proof = proofOf(name, token, request.leaseKey);
      assertOpen();
      // No proof: NOT_HOLDER without asking the backend, the same answer a wrong key gets.
      if (proof === null) throw notHolderError(name, token);
      const { keyHash } = proof;
      const released = await bounded('release', 'release', () =>
        backend.release({ name, token, keyHash }),
      );
      const state = names.get(name);
      const tracked = state?.lease?.token === token ? state.lease : undefined;
      if (released && state?.holder?.token === token) {
        // Watchers hear it now; the backend's own event about it is then old news.
        onBackendEvent(state, { name, type: 'released', token });
      } else if (state && tracked && (released || tracked.keyHash === keyHash)) {
        // Refused with the lease's own key: it has ended. Refused with another key: it is still
        // the holder's, who must go on hearing of it (lock.lost) and using it without a key.
        untrack(state);
        dropIfIdle(state);
      }
      if (!released) throw notHolderError(name, token);
      notify('released', name, token);
    },

    async extend(options) {
      const name = validateName(options.name, limits);
      const token = checkToken(options.token);
      const ttlMs = validateTtl(options.ttlMs, limits);
      const proof = proofOf(name, token, options.leaseKey);
      assertOpen();
      if (proof === null) throw notHolderError(name, token);
      const { leaseKey, keyHash } = proof;
      const state = stateOf(name);
      state.busy += 1;
      try {
        const startedAt = clock.now();
        const grant = await bounded('extend', 'extend', () =>
          backend.extend({ name, token, ttlMs, keyHash }),
        );
        if (!grant) throw notHolderError(name, token);
        if (clock.now() - startedAt >= grant.ttlMs) {
          throw new DlmError(
            'UNAVAILABLE',
            'the backend answered after the lease had already run out',
            {
              indeterminate: true,
            },
          );
        }
        track(state, grant, leaseKey, startedAt, options.onLost);
        return reportGrant(toLease(grant, leaseKey), 'extended', 0);
      } finally {
        state.busy -= 1;
        dropIfIdle(state);
      }
    },

    async get(name) {
      validateName(name, limits);
      assertOpen();
      return bounded('inspect', 'inspect', () => backend.inspect(name));
    },

    async revoke(name) {
      validateName(name, limits);
      assertOpen();
      const current = await bounded('inspect', 'inspect', () => backend.inspect(name));
      if (!current) return null;
      // An operator's action: the token alone (no key) ends the lease on a backend without revoke.
      const revoked = backend.revoke
        ? await bounded('revoke', 'revoke', () => backend.revoke!(name))
        : await bounded('release', 'release', () =>
            backend.release({ name, token: current.token }),
          );
      if (!revoked) return null;
      const state = names.get(name);
      if (state?.holder?.token === current.token) {
        onBackendEvent(state, { name, type: 'revoked', token: current.token });
      } else if (state?.lease?.token === current.token) {
        lose(state, 'revoked');
        dropIfIdle(state);
      }
      return current;
    },

    watch(name, listener) {
      validateName(name, limits);
      assertOpen();
      const state = stateOf(name);
      const first = !checksEnd(state);
      state.watchers.add(listener);
      // From now on this service follows the holder: learn who it is and when its lease ends.
      if (first) {
        if (state.holder) scheduleCheck(state);
        else void check(state, 'unknown');
      }
      return () => {
        if (!state.watchers.delete(listener)) return;
        if (!checksEnd(state)) cancelCheck(state);
        dropIfIdle(state);
      };
    },

    holds(name, token) {
      return names.get(name)?.lease?.token === token;
    },

    waiters(name) {
      const state = names.get(name);
      return state ? state.queue.length + state.queuedInBackend.size : 0;
    },

    async close() {
      closed = true;
      const cancelled = new DlmError('CANCELLED', 'the server is shutting down');
      for (const state of [...names.values()]) {
        for (const waiter of [...state.queue]) settle(state, waiter, null, cancelled);
        for (const controller of state.queuedInBackend) controller.abort(cancelled);
        state.retryTimer?.cancel();
        untrack(state);
        forgetHolder(state);
        state.watchers.clear();
        names.delete(state.name);
        state.unsubscribe();
      }
    },
  };
}

/**
 * The one NOT_HOLDER error: the same message whether the token no longer holds or the key is
 * wrong or missing, so a caller learns nothing about someone else's lease.
 */
export function notHolderError(name: string, token: bigint): DlmError {
  return new DlmError(
    'NOT_HOLDER',
    `token ${token} does not hold lock ${JSON.stringify(name)} (released, expired or taken over)`,
  );
}

function asDlmError(error: unknown): DlmError {
  if (isDlmError(error)) return error;
  return new DlmError('INTERNAL', error instanceof Error ? error.message : String(error), {
    cause: error,
  });
}
