import {
  type Budget,
  budget,
  type Clock,
  createLeaseKey,
  DlmError,
  isDlmError,
  type Limits,
  parseToken,
  type RetryAttempt,
  type RetryOptions,
  type RetryPolicy,
  retry,
  validateAcquireFields,
  validateName,
  validateOwner,
} from '@dlm/core';
import type { ParamsOf, ResultOf } from '@dlm/protocol';
import type { BackgroundCleanup } from './background-cleanup.js';
import type { AcquireOptions } from './client.js';
import type { CallOptions, Connection } from './connection.js';
import { closedError } from './failures.js';
import type { HeldLeases } from './held-leases.js';
import {
  createLease,
  driftMarginMs,
  type Lease,
  type LeaseContext,
  type LeaseGrant,
} from './lease.js';
import { activeTraceparent, spanless, withClientSpan } from './tracing.js';

/** What acquiring needs from the client. */
export interface AcquireContext {
  readonly clock: Clock;
  readonly requestTimeoutMs: number;
  readonly connection: Connection;
  readonly closed: boolean;
  readonly held: HeldLeases;
  readonly cleanup: BackgroundCleanup;
  readonly leaseContext: LeaseContext;
  /** This package's version, for its tracer. */
  readonly version: string;
  limits(): Limits;
  policyFor(retryOptions: RetryOptions | false | undefined, signal?: AbortSignal): RetryPolicy;
}

/** What acquire knows beyond its options. */
export interface AcquireInternals {
  /** The owner was made up here (not the caller's), so whatever it holds is nobody else's. */
  ownerIsOurs?: boolean;
  /** The client span's context, sent with every try (and the re-anchoring extend). */
  traceparent?: string | undefined;
}

/** One lease a reply grants (`lock.acquire`'s result, one of `lock.acquireAll`'s grants). */
export type Grant = ResultOf<'lock.acquire'>;

/**
 * The acquire path, in a client span when the application has OpenTelemetry (the span's context
 * goes to the server as `traceparent`, so that the server's acquire span is its child).
 */
export function acquire(
  context: AcquireContext,
  name: string,
  options: AcquireOptions,
  internals: AcquireInternals = {},
): Promise<Lease> {
  if (context.closed) return Promise.reject(closedError());
  // Untraced (the common case): no span, no closures, no async frame for it.
  if (spanless(context.version)) {
    const traceparent = activeTraceparent();
    const sent =
      traceparent === internals.traceparent
        ? internals
        : Object.assign({}, internals, { traceparent });
    return acquireLease(context, name, options, sent);
  }
  const span = {
    method: 'lock.acquire',
    attributes: {
      'dlm.lock.name': name,
      'dlm.lock.ttl_ms': options.ttlMs,
      'dlm.lock.wait_ms': options.waitMs ?? 0,
    },
    outcome: 'granted',
    describe: (lease: Lease) => ({ 'dlm.lock.token': lease.token.toString() }),
  };
  return withClientSpan(context.version, span, (traceparent) =>
    acquireLease(context, name, options, Object.assign({}, internals, { traceparent })),
  );
}

/**
 * Checks the request, sends it (retried with one owner and one key), makes sure the lease it got
 * is still worth having, and hands it over as a `Lease`: one promise chain, whose steps after the
 * reply run at once unless the grant needs re-anchoring.
 */
function acquireLease(
  context: AcquireContext,
  name: string,
  options: AcquireOptions,
  internals: AcquireInternals,
): Promise<Lease> {
  if (context.closed) return Promise.reject(closedError());
  let tries: AcquireTries;
  try {
    tries = new AcquireTries(context, name, options, internals);
  } catch (error) {
    return Promise.reject(error);
  }
  return tries.run().then((result) => {
    const anchored = anchorNow(context, result, tries);
    return anchored instanceof Promise
      ? anchored.then((later) => holdLease(context, result, later, tries, options))
      : holdLease(context, result, anchored, tries, options);
  });
}

function holdLease(
  context: AcquireContext,
  result: Grant,
  anchored: AnchoredGrant,
  request: GrantRequest,
  options: AcquireOptions,
): Lease {
  const handle = createLease(context.leaseContext, leaseGrant(result, anchored, request, options));
  context.held.add(handle);
  return handle.lease;
}

/** The request a grant answered: what anchoring it and making its lease need. */
export interface GrantRequest {
  readonly key: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly sentAt: number;
  readonly traceparent: string | undefined;
}

/** A grant's token and its lease as the client counts it: granted `ttlMs` from `sentAt`. */
export interface AnchoredGrant {
  token: bigint;
  ttlMs: number;
  sentAt: number;
}

/**
 * Makes sure a grant is still worth having: re-anchored by an extend when it came during a long
 * wait, and refused (released in the background) when its local deadline has passed (S5).
 */
export async function anchorGrant(
  context: AcquireContext,
  result: Grant,
  request: GrantRequest,
): Promise<AnchoredGrant> {
  return anchorNow(context, result, request);
}

/** `anchorGrant`, answered at once (or throwing) unless the grant needs an extend first. */
function anchorNow(
  context: AcquireContext,
  result: Grant,
  request: GrantRequest,
): AnchoredGrant | Promise<AnchoredGrant> {
  const token = parseToken(result.token);
  if (request.waitMs > 0 && context.clock.now() - request.sentAt > result.ttlMs / 10) {
    return reanchor(context, request, result, token).then((anchored) => {
      rejectIfRunOut(context, result.name, request.key, anchored);
      return anchored;
    });
  }
  const anchored: AnchoredGrant = { token, ttlMs: result.ttlMs, sentAt: request.sentAt };
  rejectIfRunOut(context, result.name, request.key, anchored);
  return anchored;
}

/** What the lease of an anchored grant is made from. */
export function leaseGrant(
  result: Grant,
  anchored: AnchoredGrant,
  request: GrantRequest,
  options: { autoExtend?: boolean; lockDelayMs?: number; maxHoldMs?: number },
): LeaseGrant {
  const mode = result.mode ?? 'exclusive';
  return {
    name: result.name,
    owner: result.owner,
    token: anchored.token,
    leaseKey: request.key,
    ttlMs: anchored.ttlMs,
    requestedTtlMs: request.ttlMs,
    sentAt: anchored.sentAt,
    autoExtend: options.autoExtend === true,
    mode,
    ...(mode === 'shared' && result.limit !== undefined ? { limit: result.limit } : {}),
    ...((options.lockDelayMs ?? 0) > 0 ? { lockDelay: true } : {}),
    ...(options.maxHoldMs === undefined ? {} : { maxHold: true }),
  };
}

/** The methods that grant leases, and what their tries share. */
export type GrantMethod = 'lock.acquire' | 'lock.acquireAll';

/** What every try of one call sends and how it is retried: the same on every try. */
export interface TriesSettings {
  /** One key for every try, so that a try re-sent (to another server, too) is recognised. */
  key: string;
  ttlMs: number;
  waitMs: number;
  /**
   * One owner for every try: the server answers a re-sent acquire by this owner with the lease
   * it already granted (same token), so a grant whose reply was lost is not granted twice.
   */
  owner: string;
  /** The owner was made up here: whatever it holds is nobody else's. */
  ownerIsOurs: boolean;
  policy: RetryPolicy;
  /** Told the place among the waiters (`lock.queued`) while a try waits. */
  onQueued?: ((position: number) => void) | undefined;
  traceparent: string | undefined;
}

/** The settings of a call with `options`, once its TTL and wait are checked. */
export function triesSettings(
  context: AcquireContext,
  options: AcquireOptions,
  checked: Pick<TriesSettings, 'key' | 'ttlMs' | 'waitMs' | 'traceparent'>,
  ownerIsOurs = options.owner === undefined,
): TriesSettings {
  return {
    key: checked.key,
    ttlMs: checked.ttlMs,
    waitMs: checked.waitMs,
    traceparent: checked.traceparent,
    owner: options.owner ?? globalThis.crypto.randomUUID(),
    ownerIsOurs,
    policy: context.policyFor(options.retry, options.signal),
    onQueued: options.onQueued,
  };
}

/**
 * The tries of one acquire (or acquireAll), and what they leave behind: a grant whose reply came
 * after its try had given up, or a try that was sent when its connection dropped, may be a lease
 * this caller never sees. Which of those to give back is known only once the call succeeded or
 * failed. `grantsOf` lists the leases in one of the method's results.
 */
export abstract class GrantTries<M extends GrantMethod>
  implements GrantRequest, CallOptions<ResultOf<M>>
{
  readonly key: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly owner: string;
  readonly ownerIsOurs: boolean;
  readonly policy: RetryPolicy;
  readonly traceparent: string | undefined;
  readonly onQueued: ((position: number) => void) | undefined;
  /** When the try that counts was sent, on the clock (the lease's deadline counts from it). */
  sentAt = Number.NaN;
  /**
   * The tries are their own call options (a write; the current try's timeout), so that a try
   * without a signal to pass allocates no options object and no callbacks.
   */
  readonly write = true;
  timeoutMs = 0;
  /** What is left of `waitMs` across the tries (none for a try-lock: it never waits). */
  private readonly waitBudget: Budget | undefined;
  private outcome: 'pending' | 'granted' | 'failed' = 'pending';
  private kept: ResultOf<M> | undefined;
  /** A try may have been granted without the reply reaching us: a drop or a timeout. */
  private maybeGranted = false;
  private lateResults: ResultOf<M>[] | undefined;

  constructor(
    protected readonly context: AcquireContext,
    private readonly method: M,
    settings: TriesSettings,
  ) {
    this.key = settings.key;
    this.ttlMs = settings.ttlMs;
    this.waitMs = settings.waitMs;
    this.owner = settings.owner;
    this.ownerIsOurs = settings.ownerIsOurs;
    this.onQueued = settings.onQueued;
    this.policy = settings.policy;
    this.traceparent = settings.traceparent;
    this.waitBudget =
      settings.waitMs > 0 ? budget(method, settings.waitMs, context.clock) : undefined;
  }

  /** The method's own params (what names the locks, the TTL, the owner and the key). */
  protected abstract params(): ParamsOf<M>;
  /** The leases one result grants. */
  protected abstract grantsOf(result: ResultOf<M>): readonly Grant[];
  /** An acquire whose reply may have been lost: look up what it may hold, and free it. */
  protected abstract orphaned(): void;

  readonly attempt = (attempt: RetryAttempt): Promise<ResultOf<M>> => {
    const wait = this.waitFor(attempt);
    const params: ParamsOf<GrantMethod> = this.params();
    if (wait > 0) params.waitMs = wait;
    if (wait > 0 && this.onQueued && this.method === 'lock.acquire') {
      (params as ParamsOf<'lock.acquire'>).progress = true;
    }
    if (this.traceparent) params.traceparent = this.traceparent;
    return this.context.connection.call(
      this.method,
      params as ParamsOf<M>,
      this.callOptions(attempt, wait),
    );
  };

  onSent(at: number): void {
    this.sentAt = at;
  }

  /** Every try, under the call's policy; what they left behind is settled either way. */
  run(): Promise<ResultOf<M>> {
    return retry(this.attempt, this.policy, { clock: this.context.clock }).then(
      this.granted,
      this.failed,
    );
  }

  /** What is left of `waitMs` for this try, leaving its reply time before the overall deadline. */
  protected waitFor(attempt: RetryAttempt): number {
    let wait = this.waitBudget ? Math.max(0, this.waitBudget.remainingMs()) : 0;
    if (Number.isFinite(attempt.remainingMs)) {
      const replyAllowanceMs = Math.min(
        this.context.requestTimeoutMs,
        1_000,
        attempt.remainingMs / 2,
      );
      wait = Math.min(wait, Math.max(0, attempt.remainingMs - replyAllowanceMs));
    }
    return Math.floor(wait);
  }

  /** How one try is sent: a write, timed out after its wait and its reply, told of drops. */
  private callOptions(attempt: RetryAttempt, wait: number): CallOptions<ResultOf<M>> {
    const timeoutMs = Math.max(
      1,
      Math.min(this.context.requestTimeoutMs + wait, attempt.remainingMs),
    );
    // Without a signal in the policy nothing can abort the attempt's: the tries themselves
    // (their `onQueued` too: it hears something only for an acquire sent with `progress`).
    if (!this.policy.signals.length) {
      this.timeoutMs = timeoutMs;
      return this;
    }
    const options: CallOptions<ResultOf<M>> = {
      write: true,
      timeoutMs,
      signal: attempt.signal,
      onSent: (at) => this.onSent(at),
      onLateResult: (late) => this.onLateResult(late),
      onDropped: () => this.onDropped(),
    };
    if (this.onQueued) options.onQueued = this.onQueued;
    return options;
  }

  /** A success reply that came after its try gave up. */
  onLateResult(late: ResultOf<M>): void {
    if (this.outcome === 'pending') {
      this.lateResults ??= [];
      this.lateResults.push(late);
    } else this.discard(late, this.outcome === 'granted' ? this.kept : undefined);
  }

  /** A try was sent and its connection went down before any reply. */
  onDropped(): void {
    if (this.outcome === 'pending') this.maybeGranted = true;
    else if (this.outcome === 'failed') this.orphaned();
  }

  private readonly granted = (result: ResultOf<M>): ResultOf<M> => {
    this.outcome = 'granted';
    this.kept = result;
    if (this.lateResults) for (const late of this.lateResults) this.discard(late, result);
    return result;
  };

  private readonly failed = (error: unknown): never => {
    this.outcome = 'failed';
    if (this.lateResults) for (const late of this.lateResults) this.discard(late, undefined);
    // Decided only now: while tries went on, a later one could still get this same lease.
    if (this.maybeGranted) this.orphaned();
    throw error;
  };

  /** Gives back the leases of `late`, except those `kept` (the same token: ours, in use). */
  private discard(late: ResultOf<M>, kept: ResultOf<M> | undefined): void {
    const keptGrants = kept === undefined ? [] : this.grantsOf(kept);
    for (const grant of this.grantsOf(late)) {
      const same = keptGrants.some((k) => k.name === grant.name && k.token === grant.token);
      if (!same) this.context.cleanup.discardGrant(grant, this.key, grant.ttlMs);
    }
  }
}

/** The tries of one acquire. */
class AcquireTries extends GrantTries<'lock.acquire'> {
  constructor(
    context: AcquireContext,
    readonly name: string,
    options: AcquireOptions,
    internals: AcquireInternals,
  ) {
    // Checked here, before anything is sent, by the same code the server runs: the same code,
    // field and message as the server's answer would have.
    const limits = context.limits();
    validateName(name, limits);
    const fields = validateAcquireFields(options, limits);
    const { ttlMs, waitMs, requestRelease, lockDelayMs, maxHoldMs } = fields;
    if (options.owner !== undefined) validateOwner(options.owner, limits);
    // Re-entering as an owner that holds the lock here presents that lease's key.
    const key =
      options.leaseKey ??
      (options.owner === undefined ? undefined : context.held.keyFor(name, options.owner)) ??
      createLeaseKey();
    const { traceparent, ownerIsOurs } = internals;
    super(
      context,
      'lock.acquire',
      triesSettings(context, options, { key, ttlMs, waitMs, traceparent }, ownerIsOurs),
    );
    // Sent only when asked: a server that predates release requests never sees the field.
    this.requestRelease = requestRelease;
    // Sent as asked: a shared request without a limit leaves the default to the server.
    if (fields.mode === 'shared') {
      this.mode =
        options.limit === undefined ? { mode: 'shared' } : { mode: 'shared', limit: fields.limit };
    }
    if (lockDelayMs > 0) this.lockDelayMs = lockDelayMs;
    this.maxHoldMs = maxHoldMs;
  }

  private readonly lockDelayMs: number | undefined;
  private readonly maxHoldMs: number | undefined;

  private readonly mode: Pick<ParamsOf<'lock.acquire'>, 'mode' | 'limit'> | undefined;
  private readonly requestRelease: boolean;

  protected params(): ParamsOf<'lock.acquire'> {
    const params: ParamsOf<'lock.acquire'> = {
      name: this.name,
      ttlMs: this.ttlMs,
      owner: this.owner,
      leaseKey: this.key,
    };
    if (this.requestRelease) params.requestRelease = true;
    if (this.lockDelayMs !== undefined) params.lockDelayMs = this.lockDelayMs;
    if (this.maxHoldMs !== undefined) params.maxHoldMs = this.maxHoldMs;
    return this.mode ? Object.assign(params, this.mode) : params;
  }

  protected grantsOf(result: Grant): readonly Grant[] {
    return [result];
  }

  protected orphaned(): void {
    this.context.cleanup.orphaned(this.name, this.owner, this.key, this.ownerIsOurs, this.ttlMs);
  }
}

/**
 * The server granted the lock at some unknown moment during the wait, so the send time says
 * little about when the lease ends. An immediate extend gives a send time that does.
 */
async function reanchor(
  context: AcquireContext,
  request: GrantRequest,
  result: Grant,
  token: bigint,
): Promise<AnchoredGrant> {
  const { name } = result;
  let sentAt = Number.NaN;
  try {
    const params: ParamsOf<'lock.extend'> = {
      name,
      token: result.token,
      ttlMs: request.ttlMs,
      leaseKey: request.key,
    };
    if (request.traceparent) params.traceparent = request.traceparent;
    const extended = await context.connection.call('lock.extend', params, {
      write: true,
      onSent: (at) => {
        sentAt = at;
      },
    });
    return { token, ttlMs: extended.ttlMs, sentAt };
  } catch (error) {
    if (!isDlmError(error, 'NOT_HOLDER')) {
      context.cleanup.release(name, token, request.key, result.ttlMs);
      throw error;
    }
    throw new DlmError('UNAVAILABLE', `the lease on ${JSON.stringify(name)} ran out in transit`, {
      cause: error,
    });
  }
}

/** A grant whose local deadline has passed by the time it arrives is of no use (S5). */
function rejectIfRunOut(
  context: AcquireContext,
  name: string,
  key: string,
  { token, ttlMs, sentAt }: AnchoredGrant,
): void {
  if (context.clock.now() < sentAt + ttlMs - driftMarginMs(ttlMs)) return;
  context.cleanup.release(name, token, key, ttlMs);
  throw new DlmError(
    'UNAVAILABLE',
    `the grant of ${JSON.stringify(name)} arrived after its lease had run out`,
  );
}
