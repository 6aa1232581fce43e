import { randomBytes } from 'node:crypto';
import type * as core from '@dlm/core';
import { createRenewedFairQueue, DlmError } from '@dlm/core';
import type { LockEvents } from './lock-events.js';
import { type QueueReply, type QueueRequest, type RedisNode, sharedLimit } from './redis-node.js';

/**
 * The cross-server fair queue on Redis: core's wait loop over entries this server renews
 * (`createRenewedFairQueue`) with a driver whose queue is two sorted sets in the name's hash slot
 * (QUEUE_JOIN in redis-scripts.ts), as Redisson's `RedissonFairLock` keeps a list of waiters and a
 * timeout set. A waiter sleeps on the entry just ahead of its own (its `left` message wakes only
 * the waiter behind it) or, at the head, on the holder (its release, revocation or expiry event,
 * with the holder's remaining lease as the fallback timer). An entry whose dlm server stopped
 * renewing it stops counting at its end on the Redis server's clock: a timer at that end makes the
 * waiter behind look again (the look removes it).
 *
 * Modes: both share the one queue; an entry's id carries its mode, and the look's predicate is
 * fair-queue.ts's (LOOK_AT in redis-scripts.ts). A shared waiter may sleep on the last exclusive
 * entry ahead, on the nearest shared entry ahead, or on the holders; since the shared entries
 * ahead count against its limit, any entry's departure also wakes a shared waiter sleeping on
 * the holders. A conflict (another limit, the other mode) found by a join or a look ends the
 * wait (`conflict`), its entry removed like any other.
 */

/** What the queue needs from the backend it belongs to. */
export interface QueueContext {
  node: RedisNode;
  events: LockEvents;
  clock: core.Clock;
  /** How long an entry counts without its server's renewal. */
  waiterTtlMs: number;
  isClosed(): boolean;
  /** Resolves once the event subscription is in place (rejects after the call's bound). */
  subscribed(startedAt: number): Promise<void>;
  /** After a grant: Redis replicas confirm it where the backend asks for that. */
  confirmGrant(name: string, token: bigint): Promise<void>;
  /** Gives back a lease granted too late to be reported. */
  release(grant: core.Grant, keyHash: string | undefined): Promise<unknown>;
  /** The backend's try-lock (refused while anyone is queued for the name). */
  tryAcquire(request: core.AcquireRequest): Promise<core.AcquireResult>;
}

/** The queue of a Redis backend. Its `resync` is for an event stream that came back. */
export type RedisQueue = core.RenewedFairQueue;

export function redisQueue(context: QueueContext): RedisQueue {
  const { node, waiterTtlMs } = context;
  const ids = entryIds();
  return createRenewedFairQueue({
    clock: context.clock,
    backend: 'Redis',
    isClosed: context.isClosed,
    // Releases and expiries arrive as events; the timer only covers a missed one.
    expirySlackMs: 250,
    // After an entry ahead should have ended, look this much later (its end is the server's).
    aheadSlackMs: 50,
    waiterTtlMs,
    // One script per name (a name's entries live in its hash slot).
    renew: (byName) =>
      Promise.all(
        [...byName].map(([name, mine]) =>
          node.queueRenew(name, mine, waiterTtlMs).catch(() => undefined),
        ),
      ),
    driver: (request, watcher, entry) => new RedisWaiter(context, entry, ids, request, watcher),
    acquire: tryLockFirst(context),
  });
}

/**
 * A wait on a name that none of this server's waits is on starts with a plain try-lock: free
 * and nobody queued anywhere, that is the whole wait (one script, none of the queue's
 * machinery). Otherwise, or when refused, it queues. A wait of this server that comes while
 * that try-lock runs queues after it has settled, behind the first (which takes its turn to
 * join before them: it was the first to wait on that try-lock's outcome).
 */
function tryLockFirst(context: QueueContext): NonNullable<core.RenewedFairQueueOptions['acquire']> {
  /** Per name, how many waits of this server are running. */
  const waits = new Map<string, number>();
  const counted = async <T>(name: string, run: () => Promise<T>): Promise<T> => {
    waits.set(name, (waits.get(name) ?? 0) + 1);
    try {
      return await run();
    } finally {
      const left = (waits.get(name) ?? 1) - 1;
      if (left === 0) waits.delete(name);
      else waits.set(name, left);
    }
  };
  /** Per name, the try-lock a first wait is making. */
  const trying = new Map<string, Promise<unknown>>();
  return (request, queued) =>
    counted(request.name, async () => {
      const { name, signal, keyHash } = request;
      const pending = trying.get(name);
      if (pending) await pending;
      else if (waits.get(name) === 1 && !signal.aborted && !context.isClosed()) {
        const startedAt = context.clock.now();
        const attempt = context.tryAcquire(request);
        const settled = attempt.then(
          () => undefined,
          () => undefined,
        );
        trying.set(name, settled);
        try {
          const first = await attempt;
          if (first.granted) {
            return { granted: true, grant: await inTime(context, first.grant, keyHash, startedAt) };
          }
          // Never grantable as asked while they hold it: there is nothing to wait for.
          if (first.conflict) return first;
        } finally {
          if (trying.get(name) === settled) trying.delete(name);
        }
      }
      return queued(request);
    });
}

/**
 * Fresh entry ids, unique across servers and waits, ending in the request's mode (`.s` shared,
 * `.x` exclusive): the queue scripts read the mode of the entries ahead from it.
 */
function entryIds(): (shared: boolean) => string {
  const server = randomBytes(9).toString('base64url');
  let counter = 0;
  return (shared) => {
    counter += 1;
    return `${server}.${counter}.${shared ? 's' : 'x'}`;
  };
}

/** One queued acquire: its entry's id while queued, and what it sleeps on. */
class RedisWaiter implements core.RenewedQueueDriver {
  private readonly unsubscribe: core.Unsubscribe[];
  /** Shared: the limit; undefined: exclusive. */
  private readonly limit: number | undefined;

  constructor(
    private readonly context: QueueContext,
    private readonly entry: core.QueueEntry,
    private readonly nextId: (shared: boolean) => string,
    private readonly request: core.AcquireRequest,
    watcher: core.QueueWatcher,
  ) {
    const { events } = context;
    this.limit = sharedLimit(request.mode, request.limit);
    const shared = this.limit !== undefined;
    this.unsubscribe = [
      events.watch(request.name, (event) => {
        if (event.type === 'acquired') return;
        // This server's oldest waiter also looks when it sleeps on an entry ahead: if that
        // entry's server died, nobody else would tell it before the entry's end. One look per
        // server per release at most.
        const first = entry.first();
        watcher.changed((step) => step.kind === 'holder' || first);
      }),
      events.watchQueue(request.name, (id) => {
        // A shared waiter at the limit also counts the shared entries ahead: one leaving
        // without a grant leaves room.
        watcher.changed(
          (step) =>
            (step.kind === 'predecessor' && step.key === id) || (shared && step.kind === 'holder'),
        );
      }),
    ];
  }

  stop(): void {
    for (const stop of this.unsubscribe) stop();
  }

  /** If this fails, the entry is no longer renewed: it stops counting within `waiterTtlMs`. */
  async leave(): Promise<void> {
    const id = this.entry.take();
    if (id !== undefined) await this.context.node.queueLeave(this.request.name, id);
  }

  async join(): Promise<core.QueueStep> {
    const startedAt = this.context.clock.now();
    await this.context.subscribed(startedAt);
    const id = this.nextId(this.limit !== undefined);
    const reply = await this.context.node.queueJoin(this.queueRequest(id), startedAt);
    // A conflict found by the look after queuing leaves the entry there: it is ours to remove.
    if (reply.kind === 'queued' || reply.kind === 'conflict') this.entry.set(id);
    return this.step(reply, startedAt);
  }

  async look(): Promise<core.QueueStep> {
    const id = this.entry.id;
    if (id === undefined) return { kind: 'again' };
    const startedAt = this.context.clock.now();
    const reply = await this.context.node.queueLook(this.queueRequest(id), startedAt);
    // Granted: the script removed our entry with the grant.
    if (reply.kind === 'granted') this.entry.set(undefined);
    if (reply.kind === 'gone') {
      // Our entry stopped counting (this server could not renew it in time): others passed it,
      // so join again at the back.
      this.entry.set(undefined);
      return { kind: 'again' };
    }
    return this.step(reply, startedAt);
  }

  private queueRequest(id: string): QueueRequest {
    const { name, owner, ttlMs, keyHash } = this.request;
    return {
      name,
      owner,
      keyHash,
      ttlMs,
      id,
      waiterTtlMs: this.context.waiterTtlMs,
      limit: this.limit,
    };
  }

  /** A grant, or what the script found ahead of our entry: an entry, the holder, or nothing. */
  private step(reply: QueueReply, startedAt: number): Promise<core.QueueStep> | core.QueueStep {
    // Whatever the reply, the timer of the step before is cancelled. `gone`, or queued with
    // nothing ahead and no holder (first, and the lock was free, yet no grant: the look was
    // refused; it cannot be now), is `again`.
    const sleep = this.entry.sleepOn(reply.kind === 'queued' ? reply : {});
    if (reply.kind === 'granted') return this.granted(reply.token, startedAt);
    if (reply.kind === 'conflict') return { kind: 'conflict', conflict: reply.conflict };
    return sleep;
  }

  private async granted(token: bigint, startedAt: number): Promise<core.QueueStep> {
    const { name, owner, ttlMs, keyHash } = this.request;
    await this.context.confirmGrant(name, token);
    const grant = { name, owner, token, ttlMs };
    return { kind: 'granted', grant: await inTime(this.context, grant, keyHash, startedAt) };
  }
}

/** No grant is reported whose lease may already have run out (the call began at `startedAt`). */
async function inTime(
  context: QueueContext,
  grant: core.Grant,
  keyHash: string | undefined,
  startedAt: number,
): Promise<core.Grant> {
  if (context.clock.now() - startedAt < grant.ttlMs) return grant;
  await context.release(grant, keyHash).catch(() => undefined);
  throw new DlmError('UNAVAILABLE', 'Redis answered after the lease had already run out', {
    indeterminate: true,
  });
}
