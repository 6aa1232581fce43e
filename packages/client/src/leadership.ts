import {
  type Clock,
  createBackoff,
  isDlmError,
  type RetryOptions,
  type RetryPolicy,
  retryPolicy,
  sleep,
} from '@dlm/core';
import type { Lease } from './lease.js';

/**
 * Leader election on top of a lock: the leader is whoever holds the lock `name`, its term is
 * the lock's fencing token (strictly increasing from one leader to the next), and followers
 * learn of changes from the lock's watch. Nothing here needs more than protocol v1.
 */

export interface CampaignOptions {
  /**
   * The leader's lease. A leader that dies (kill -9, a lost network) is replaced at most this
   * long after its last renewal; renewals happen in the background every third of it.
   */
  ttlMs: number;
  /** Stops campaigning: `campaign` rejects with CANCELLED (a lease granted late is released). */
  signal?: AbortSignal;
  /**
   * How this candidate appears to observers (`Leader.owner`). Must be unique per candidate: two
   * candidates with one owner would both "lead". Default: a fresh random id.
   */
  owner?: string;
  /**
   * For transient failures (no server, a lost connection) while campaigning. Default: the
   * client's policy with `attempts: Infinity`, so a campaign lasts until it wins or `signal`
   * aborts. LOCK_HELD is never an error here: the campaign just keeps waiting.
   */
  retry?: RetryOptions | false;
}

/**
 * This client leads. `signal` aborts the moment leadership is lost (the lease expired, was
 * revoked, or could not be renewed before its local deadline) or given up with `resign()`:
 * stop leader-only work then, and campaign again if you want to lead again.
 */
export interface Leadership extends AsyncDisposable {
  readonly name: string;
  /** This candidate's owner id. */
  readonly owner: string;
  /** The lock's fencing token: strictly greater than every earlier leader's term. */
  readonly term: bigint;
  /** Aborts when leadership ends; `signal.reason` is a DlmError (NOT_HOLDER when lost). */
  readonly signal: AbortSignal;
  /** The lease behind it (`remainingMs()`, `lost`). */
  readonly lease: Lease;
  /**
   * Steps down: releases the lock so another candidate can lead at once. Rejects only when the
   * server could not be reached (the client then releases it after reconnecting).
   */
  resign(): Promise<void>;
}

/** The current leader as followers see it. */
export interface Leader {
  readonly owner: string;
  readonly term: bigint;
}

export interface ObserveOptions {
  /** Ends the iteration (it returns; no error). */
  signal?: AbortSignal;
}

/** What campaigning needs from the client. */
export interface CampaignContext {
  clock: Clock;
  retry: RetryPolicy;
  /** The server's longest allowed wait, connecting first if needed. */
  maxWaitMs(signal: AbortSignal | undefined, retry: RetryOptions | false): Promise<number>;
  /** An auto-extended acquire. */
  acquireLeaderLease(
    name: string,
    options: {
      ttlMs: number;
      waitMs: number;
      owner: string;
      ownerIsOurs: boolean;
      signal: AbortSignal | undefined;
      retry: RetryOptions | false;
    },
  ): Promise<Lease>;
}

/**
 * Waits until this client holds `name`, then returns the leadership. Waiting happens on the
 * server (a FIFO, event-driven wait, renewed whenever it reaches the server's `maxWaitMs`), so
 * a candidate takes over as soon as the leader's lease is released or expires.
 */
export async function campaign(
  context: CampaignContext,
  name: string,
  options: CampaignOptions,
): Promise<Leadership> {
  const owner = options.owner ?? `candidate-${globalThis.crypto.randomUUID()}`;
  const retry: RetryOptions | false =
    options.retry === false ? false : { attempts: Number.POSITIVE_INFINITY, ...options.retry };
  // Only a server that cuts waits short (a tiny maxWaitMs) makes the loop below come round
  // quickly; then back off instead of spinning.
  const backoff = createBackoff(
    retryPolicy(
      { attempts: Number.POSITIVE_INFINITY, deadlineMs: Number.POSITIVE_INFINITY },
      retryPolicy(retry || undefined, context.retry),
    ),
    { clock: context.clock },
  );
  for (;;) {
    const waitMs = await context.maxWaitMs(options.signal, retry);
    const startedAt = context.clock.now();
    try {
      const lease = await context.acquireLeaderLease(name, {
        ttlMs: options.ttlMs,
        waitMs,
        owner,
        ownerIsOurs: options.owner === undefined,
        signal: options.signal,
        retry,
      });
      return leadershipOf(lease);
    } catch (error) {
      if (!isDlmError(error, 'LOCK_HELD')) throw error;
      if (context.clock.now() - startedAt < waitMs / 2) {
        const delayMs = backoff.next();
        if (delayMs === undefined) throw error;
        // An abort ends the sleep early; the next acquire then rejects with CANCELLED.
        await sleep(context.clock, delayMs, options.signal);
      }
    }
  }
}

function leadershipOf(lease: Lease): Leadership {
  return {
    name: lease.name,
    owner: lease.owner,
    term: lease.token,
    signal: lease.signal,
    lease,
    async resign() {
      await lease.release();
    },
    [Symbol.asyncDispose]: () => lease[Symbol.asyncDispose](),
  };
}

/** What observing needs from the client. */
export interface ObserveContext {
  watch(
    name: string,
    onChange: (change: { held: boolean; owner?: string; token?: bigint }) => void,
  ): Promise<{ stop(): Promise<void> }>;
  /** The holder now (for a change that did not say who holds the lock). */
  holder(name: string): Promise<Leader | null>;
  reportError(error: unknown): void;
}

/**
 * The leader of `name` now, then every change: a new leader (`{ owner, term }`) or none
 * (`null`). Consecutive duplicates are dropped, and so is a leader older than one already
 * reported. Each `for await` sets up its own watch; leaving the loop (or aborting `signal`)
 * stops it.
 */
export function observe(
  context: ObserveContext,
  name: string,
  options: ObserveOptions = {},
): AsyncIterable<Leader | null> {
  return { [Symbol.asyncIterator]: () => observeLeaders(context, name, options) };
}

async function* observeLeaders(
  context: ObserveContext,
  name: string,
  { signal }: ObserveOptions,
): AsyncGenerator<Leader | null, void, undefined> {
  if (signal?.aborted) return;
  const queue: (Leader | null)[] = [];
  let wake: (() => void) | undefined;
  const push = (leader: Leader | null) => {
    queue.push(leader);
    wake?.();
  };
  // Changes are turned into leaders one at a time, so a lookup never reorders them.
  let chain: Promise<void> = Promise.resolve();
  const watch = await context.watch(name, (change) => {
    chain = chain.then(async () => {
      if (!change.held) push(null);
      else if (change.owner !== undefined && change.token !== undefined) {
        push({ owner: change.owner, term: change.token });
      } else {
        // The watch's first state (and some backends' notifications) lack the owner. If the
        // lookup fails, the leader stays unreported until the next change or the reconnect
        // that sets the watch up again.
        try {
          push(await context.holder(name));
        } catch (error) {
          context.reportError(error);
        }
      }
    });
  });
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort, { once: true });
  let last: Leader | null | undefined;
  let highestTerm = 0n;
  try {
    for (;;) {
      while (queue.length > 0) {
        const next = queue.shift() as Leader | null;
        if (next && next.term < highestTerm) continue; // a lookup overtaken by a newer change
        if (last !== undefined && sameLeader(next, last)) continue;
        if (next) highestTerm = next.term;
        last = next;
        yield next;
        if (signal?.aborted) return;
      }
      if (signal?.aborted) return;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    await watch.stop();
  }
}

function sameLeader(a: Leader | null, b: Leader | null): boolean {
  if (a === null || b === null) return a === b;
  return a.term === b.term && a.owner === b.owner;
}
