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
  validateName,
  validateOwner,
  validateTtl,
  validateWait,
} from '@dlm/core';
import type { ParamsOf, ResultOf } from '@dlm/protocol';
import type { BackgroundCleanup } from './background-cleanup.js';
import type { AcquireOptions } from './client.js';
import type { CallOptions, Connection } from './connection.js';
import { closedError } from './failures.js';
import type { HeldLeases } from './held-leases.js';
import { createLease, driftMarginMs, type Lease, type LeaseContext } from './lease.js';
import { withClientSpan } from './tracing.js';

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

type Grant = ResultOf<'lock.acquire'>;

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
    acquireLease(context, name, options, { ...internals, traceparent }),
  );
}

/**
 * Checks the request, sends it (retried with one owner and one key), makes sure the lease it got
 * is still worth having, and hands it over as a `Lease`.
 */
async function acquireLease(
  context: AcquireContext,
  name: string,
  options: AcquireOptions,
  internals: AcquireInternals,
): Promise<Lease> {
  if (context.closed) throw closedError();
  const tries = new AcquireTries(context, name, options, internals);
  let result: Grant;
  try {
    result = await retry(tries.attempt, tries.policy, { clock: context.clock });
  } catch (error) {
    tries.failed();
    throw error;
  }
  tries.granted(result);
  const token = parseToken(result.token);
  let grantedTtlMs = result.ttlMs;
  if (tries.waitMs > 0 && context.clock.now() - tries.sentAt > grantedTtlMs / 10) {
    grantedTtlMs = await reanchor(context, tries, result, token);
  }
  rejectIfRunOut(context, tries, token, grantedTtlMs);
  const handle = createLease(context.leaseContext, {
    name: result.name,
    owner: result.owner,
    token,
    leaseKey: tries.key,
    ttlMs: grantedTtlMs,
    requestedTtlMs: tries.ttlMs,
    sentAt: tries.sentAt,
    autoExtend: options.autoExtend === true,
  });
  context.held.add(handle);
  return handle.lease;
}

/**
 * The tries of one acquire, and what they leave behind: a grant whose reply came after its try
 * had given up, or a try that was sent when its connection dropped, may be a lease this caller
 * never sees. Which of those to give back is known only once the acquire succeeded or failed.
 */
class AcquireTries {
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly owner: string;
  readonly ownerIsOurs: boolean;
  readonly key: string;
  readonly policy: RetryPolicy;
  readonly traceparent: string | undefined;
  /** What is left of `waitMs` across the tries (none for a try-lock: it never waits). */
  private readonly waitBudget: Budget | undefined;
  /** When the try that counts was sent, on the clock (the lease's deadline counts from it). */
  sentAt = Number.NaN;
  private outcome: 'pending' | 'granted' | 'failed' = 'pending';
  private grantedToken: string | undefined;
  /** A try may have been granted without the reply reaching us: a drop or a timeout. */
  private maybeGranted = false;
  private lateGrants: Grant[] | undefined;

  constructor(
    private readonly context: AcquireContext,
    readonly name: string,
    options: AcquireOptions,
    internals: AcquireInternals,
  ) {
    // Checked here, before anything is sent, by the same code the server runs: the same code,
    // field and message as the server's answer would have.
    const limits = context.limits();
    validateName(name, limits);
    this.ttlMs = validateTtl(options.ttlMs, limits);
    this.waitMs = validateWait(options.waitMs, limits);
    if (options.owner !== undefined) validateOwner(options.owner, limits);
    // One owner for every try: the server answers a re-sent acquire by this owner with the lease
    // it already granted (same token), so a grant whose reply was lost is not granted twice.
    this.owner = options.owner ?? globalThis.crypto.randomUUID();
    this.ownerIsOurs = internals.ownerIsOurs ?? options.owner === undefined;
    // One key for every try too, for the same reason, and so that a try re-sent on a connection
    // to another server is still recognised. Re-entering as an owner that holds the lock here
    // presents that lease's key.
    this.key =
      options.leaseKey ??
      (options.owner === undefined ? undefined : context.held.keyFor(name, this.owner)) ??
      createLeaseKey();
    this.policy = context.policyFor(options.retry, options.signal);
    this.traceparent = internals.traceparent;
    this.waitBudget =
      this.waitMs > 0 ? budget('lock.acquire', this.waitMs, context.clock) : undefined;
  }

  readonly attempt = (attempt: RetryAttempt): Promise<Grant> => {
    const { context } = this;
    const wait = this.waitFor(attempt);
    const params: ParamsOf<'lock.acquire'> = {
      name: this.name,
      ttlMs: this.ttlMs,
      owner: this.owner,
      leaseKey: this.key,
    };
    if (wait > 0) params.waitMs = wait;
    if (this.traceparent) params.traceparent = this.traceparent;
    const callOptions: CallOptions<Grant> = {
      write: true,
      timeoutMs: Math.max(1, Math.min(context.requestTimeoutMs + wait, attempt.remainingMs)),
      onSent: this.onSent,
      onLateResult: this.onLateResult,
      onDropped: this.onDropped,
    };
    // Without a signal in the policy nothing can abort the attempt's: skip it.
    if (this.policy.signals.length) callOptions.signal = attempt.signal;
    return context.connection.call('lock.acquire', params, callOptions);
  };

  /** What is left of `waitMs` for this try, leaving its reply time before the overall deadline. */
  private waitFor(attempt: RetryAttempt): number {
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

  readonly onSent = (at: number): void => {
    this.sentAt = at;
  };

  private readonly onLateResult = (late: Grant): void => {
    if (this.outcome === 'pending') {
      this.lateGrants ??= [];
      this.lateGrants.push(late);
    }
    // The same token is the lease a later try got: ours, in use.
    else if (this.outcome === 'failed' || late.token !== this.grantedToken) {
      this.context.cleanup.discardGrant(late, this.key, late.ttlMs);
    }
  };

  private readonly onDropped = (): void => {
    if (this.outcome === 'pending') this.maybeGranted = true;
    else if (this.outcome === 'failed') this.orphaned();
  };

  granted(result: Grant): void {
    this.outcome = 'granted';
    this.grantedToken = result.token;
    for (const late of this.lateGrants ?? []) {
      if (late.token !== result.token)
        this.context.cleanup.discardGrant(late, this.key, late.ttlMs);
    }
  }

  failed(): void {
    this.outcome = 'failed';
    for (const late of this.lateGrants ?? []) {
      this.context.cleanup.discardGrant(late, this.key, late.ttlMs);
    }
    // Decided only now: while tries went on, a later one could still get this same lease.
    if (this.maybeGranted) this.orphaned();
  }

  private orphaned(): void {
    this.context.cleanup.orphaned(this.name, this.owner, this.key, this.ownerIsOurs, this.ttlMs);
  }
}

/**
 * The server granted the lock at some unknown moment during the wait, so the send time says
 * little about when the lease ends. An immediate extend gives a send time that does.
 */
async function reanchor(
  context: AcquireContext,
  tries: AcquireTries,
  result: Grant,
  token: bigint,
): Promise<number> {
  const { name } = tries;
  try {
    const params: ParamsOf<'lock.extend'> = {
      name,
      token: result.token,
      ttlMs: tries.ttlMs,
      leaseKey: tries.key,
    };
    if (tries.traceparent) params.traceparent = tries.traceparent;
    const extended = await context.connection.call('lock.extend', params, {
      write: true,
      onSent: tries.onSent,
    });
    return extended.ttlMs;
  } catch (error) {
    if (!isDlmError(error, 'NOT_HOLDER')) {
      context.cleanup.release(name, token, tries.key, result.ttlMs);
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
  tries: AcquireTries,
  token: bigint,
  grantedTtlMs: number,
): void {
  if (context.clock.now() < tries.sentAt + grantedTtlMs - driftMarginMs(grantedTtlMs)) return;
  context.cleanup.release(tries.name, token, tries.key, grantedTtlMs);
  throw new DlmError(
    'UNAVAILABLE',
    `the grant of ${JSON.stringify(tries.name)} arrived after its lease had run out`,
  );
}
