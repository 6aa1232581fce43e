import { createLeaseKey, validateOwner, validateTtl, validateWait } from '@dlm/core';
import type { ParamsOf, ResultOf } from '@dlm/protocol';
import {
  type AcquireContext,
  type AnchoredGrant,
  anchorGrant,
  type Grant,
  GrantTries,
  leaseGrant,
  triesSettings,
} from './acquire.js';
import type { AcquireOptions } from './client.js';
import { closedError } from './failures.js';
import { createLease, type Lease } from './lease.js';
import { createLeaseGroup, type LeaseGroup } from './lease-group.js';
import { checkLockSpecs, type LockSpec } from './lock-specs.js';
import { withClientSpan } from './tracing.js';

type Grants = ResultOf<'lock.acquireAll'>;

/**
 * `acquireAll`: every lock or none, in a client span when the application has OpenTelemetry.
 * The server takes the names in one canonical order (concurrent calls over overlapping sets
 * cannot deadlock) and gives back what it took before it reports a failure.
 */
export function acquireAll(
  context: AcquireContext,
  locks: readonly (string | LockSpec)[],
  options: AcquireOptions,
): Promise<LeaseGroup> {
  if (context.closed) return Promise.reject(closedError());
  const span = {
    method: 'lock.acquireAll',
    attributes: {
      'dlm.lock.count': Array.isArray(locks) ? locks.length : 0,
      'dlm.lock.ttl_ms': options.ttlMs,
      'dlm.lock.wait_ms': options.waitMs ?? 0,
    },
    outcome: 'granted',
    describe: (group: LeaseGroup) => ({
      'dlm.lock.names': group.leases.map((lease) => lease.name),
      'dlm.lock.tokens': group.leases.map((lease) => lease.token.toString()),
    }),
  };
  return withClientSpan(context.version, span, (traceparent) =>
    acquireGroup(context, locks, options, traceparent),
  );
}

/**
 * Checks the request, sends it (retried with one owner and one key), makes sure every lease it
 * got is still worth having, and hands them over as one group. When one is not (it ran out in
 * transit), the others are released: the caller gets all or nothing here too.
 */
async function acquireGroup(
  context: AcquireContext,
  locks: readonly (string | LockSpec)[],
  options: AcquireOptions,
  traceparent: string | undefined,
): Promise<LeaseGroup> {
  if (context.closed) throw closedError();
  const tries = new AcquireAllTries(context, locks, options, traceparent);
  const result = await tries.run();
  const settled = await Promise.allSettled(
    result.grants.map((grant) => anchorGrant(context, grant, tries)),
  );
  const failure = settled.find((outcome) => outcome.status === 'rejected');
  if (failure) {
    // anchorGrant released the ones it refused; the others go back too.
    settled.forEach((outcome, i) => {
      if (outcome.status === 'fulfilled') release(context, result.grants[i]!, tries.key, outcome);
    });
    throw failure.reason;
  }
  const leases: Lease[] = result.grants.map((grant, i) => {
    const anchored = (settled[i] as PromiseFulfilledResult<AnchoredGrant>).value;
    const handle = createLease(context.leaseContext, leaseGrant(grant, anchored, tries, options));
    context.held.add(handle);
    return handle.lease;
  });
  return createLeaseGroup(leases, context.leaseContext.reportError);
}

function release(
  context: AcquireContext,
  grant: Grant,
  key: string,
  { value }: PromiseFulfilledResult<AnchoredGrant>,
): void {
  context.cleanup.release(grant.name, value.token, key, value.ttlMs);
}

/** The tries of one acquireAll: one owner and one key for every try and every lease. */
class AcquireAllTries extends GrantTries<'lock.acquireAll'> {
  readonly locks: ParamsOf<'lock.acquireAll'>['locks'];

  constructor(
    context: AcquireContext,
    specs: readonly (string | LockSpec)[],
    options: AcquireOptions,
    traceparent: string | undefined,
  ) {
    // Checked before anything is sent, as the server checks them (same code and field).
    const limits = context.limits();
    const locks = checkLockSpecs(specs, limits);
    const ttlMs = validateTtl(options.ttlMs, limits);
    const waitMs = validateWait(options.waitMs, limits);
    if (options.owner !== undefined) validateOwner(options.owner, limits);
    const key = options.leaseKey ?? heldKey(context, locks, options.owner) ?? createLeaseKey();
    super(
      context,
      'lock.acquireAll',
      triesSettings(context, options, { key, ttlMs, waitMs, traceparent }),
    );
    this.locks = locks;
  }

  protected params(): ParamsOf<'lock.acquireAll'> {
    return { locks: this.locks, ttlMs: this.ttlMs, owner: this.owner, leaseKey: this.key };
  }

  protected grantsOf(result: Grants): readonly Grant[] {
    return result.grants;
  }

  protected orphaned(): void {
    for (const { name } of this.locks) {
      this.context.cleanup.orphaned(name, this.owner, this.key, this.ownerIsOurs, this.ttlMs);
    }
  }
}

/**
 * Re-entering as an owner that holds some of the locks here presents their key, when they share
 * one (a set has one key); otherwise a fresh key.
 */
function heldKey(
  context: AcquireContext,
  locks: readonly { name: string }[],
  owner: string | undefined,
): string | undefined {
  if (owner === undefined) return undefined;
  const keys = new Set<string>();
  for (const { name } of locks) {
    const key = context.held.keyFor(name, owner);
    if (key !== undefined) keys.add(key);
  }
  const [key] = keys;
  return keys.size === 1 ? key : undefined;
}
