import { randomBytes } from 'node:crypto';
import type * as core from '@dlm/core';
import { queueWaits, queueWatch } from '@dlm/core';
import type { LockEvents } from './lock-events.js';
import { type QueueReply, type QueueRequest, type RedisNode, sharedLimit } from './redis-node.js';

/**
 * Redis's queue driver: core's wait loop runs over it, with this server's entries renewed by the
 * loop (`renewal`). The queue is two sorted sets in the name's hash slot (QUEUE_JOIN in
 * redis-scripts.ts), as Redisson's `RedissonFairLock` keeps a list of waiters and a timeout set;
 * join, look, leave and renew are one Lua script each, and a look evaluates core's grant rule in
 * Lua (LOOK_AT, checked against the rule's case table). A waiter sleeps on the entry ahead of
 * its own (its `left` message) or, at the head, on the holders (a release, revocation or
 * expiry event, with the holder's remaining lease as the fallback timer). An entry whose dlm
 * server stopped renewing it stops counting at its end on the Redis server's clock: the loop
 * looks again then (the look removes it). An entry's id ends in its mode and limit (`.x`,
 * `.s<limit>`).
 */

/** What the queue needs from the backend it belongs to. */
export interface QueueContext {
  node: RedisNode;
  events: LockEvents;
  clock: core.Clock;
  /** How long an entry counts without its server's renewal. */
  waiterTtlMs: number;
  isClosed(): boolean;
  /**
   * Resolves once the event subscription and `name`'s channel are in place (rejects after the
   * call's bound).
   */
  subscribed(name: string, startedAt: number): Promise<void>;
  /** After a grant: Redis replicas confirm it where the backend asks for that. */
  confirmGrant(name: string, token: bigint): Promise<void>;
  /** The backend's try-lock (refused while anyone is queued for the name). */
  tryAcquire(request: core.AcquireRequest): Promise<core.AcquireResult>;
}

export function redisQueue(context: QueueContext) {
  const { node, waiterTtlMs, events } = context;
  const waits = queueWaits();
  const server = randomBytes(9).toString('base64url');
  let counter = 0;
  const queue: core.BackendQueue = {
    clock: context.clock,
    // Releases and expiries arrive as events; the timer only covers a missed one.
    expirySlackMs: 250,
    // After an entry ahead should have ended, look this much later (its end is the server's).
    aheadSlackMs: 50,
    renewal: {
      waiterTtlMs,
      // One script per name (a name's entries live in its hash slot).
      renew: (byName) =>
        Promise.all(
          [...byName].map(([name, mine]) =>
            node.queueRenew(name, mine, waiterTtlMs).catch(() => undefined),
          ),
        ),
    },
    isClosed: context.isClosed,
    attach: waits.attach,
    watch: queueWatch(
      (name, listener) => events.watch(name, listener),
      (name, left) => events.watchQueue(name, (id) => left({ what: 'entry-left', key: id })),
    ),
    count: (name) => node.queuePlace(name),
    driver(request) {
      counter += 1;
      const limit = sharedLimit(request.mode, request.limit);
      const id = `${server}.${counter}.${limit === undefined ? 'x' : `s${limit}`}`;
      const alone = () => waits.drivers(request.name).length <= 1;
      return new RedisWaiter(context, request, id, limit, alone);
    },
  };
  return {
    queue,
    /** The event stream came back: renew now, and every sleeping waiter looks again. */
    resync: () => waits.resync(),
    close: () => waits.close(),
  };
}

/** One queued acquire: its entry while queued. */
class RedisWaiter implements core.QueueDriver {
  private queued = false;

  constructor(
    private readonly context: QueueContext,
    private readonly request: core.AcquireRequest,
    private readonly id: string,
    /** Shared: the limit; undefined: exclusive. */
    private readonly limit: number | undefined,
    /** Whether this is the only wait of this server on the name. */
    private readonly alone: () => boolean,
  ) {}

  entry(): string | undefined {
    return this.queued ? this.id : undefined;
  }

  stop(): void {}

  /** My entry's place among the entries that count (the queue's order is the name's sequence). */
  async position(): Promise<number | undefined> {
    if (!this.queued) return undefined;
    const place = await this.context.node.queuePlace(this.request.name, this.id);
    return place > 0 ? place : undefined;
  }

  /** If this fails, the entry is no longer renewed: it stops counting within `waiterTtlMs`. */
  async leave(id: string): Promise<void> {
    this.queued = false;
    await this.context.node.queueLeave(this.request.name, id);
  }

  async join(): Promise<core.QueueStep> {
    const startedAt = this.context.clock.now();
    // The fast path: a wait on a name that no other wait of this server is on starts with a
    // plain try-lock. Free and nobody queued anywhere, that is the whole wait (one script, no
    // subscription to wait for); refused, it queues.
    if (this.alone()) {
      const first = await this.context.tryAcquire(this.request);
      if (first.granted) return { kind: 'granted', grant: first.grant, sentAt: startedAt };
      // Never grantable as asked while they hold it: there is nothing to wait for.
      if (first.conflict) return { kind: 'conflict', conflict: first.conflict };
    }
    // The name's channel is held (the queue watch is made before the first join) and confirmed
    // before the join looks: a departure or an end published after the look reaches us.
    await this.context.subscribed(this.request.name, startedAt);
    const reply = await this.context.node.queueJoin(this.queueRequest(), startedAt);
    // A conflict found by the look after queuing leaves the entry there: it is ours to remove.
    if (reply.kind === 'queued' || reply.kind === 'conflict') this.queued = true;
    return this.step(reply, startedAt);
  }

  async look(): Promise<core.QueueStep> {
    if (!this.queued) return { kind: 'again' };
    const startedAt = this.context.clock.now();
    const reply = await this.context.node.queueLook(this.queueRequest(), startedAt);
    // Granted: the script removed our entry with the grant. Gone: our entry stopped counting
    // (this server could not renew it in time): others passed it, so join again at the back.
    if (reply.kind === 'granted' || reply.kind === 'gone') this.queued = false;
    return this.step(reply, startedAt);
  }

  private queueRequest(): QueueRequest {
    const { name, owner, ttlMs, keyHash, lockDelayMs, maxHoldMs } = this.request;
    const { waiterTtlMs } = this.context;
    const { id, limit } = this;
    return { name, owner, keyHash, ttlMs, id, waiterTtlMs, limit, lockDelayMs, maxHoldMs };
  }

  /** A grant, or what the script found ahead of our entry: an entry, the holder, or nothing. */
  private async step(reply: QueueReply, startedAt: number): Promise<core.QueueStep> {
    if (reply.kind === 'granted') {
      const { name, owner, ttlMs } = this.request;
      await this.context.confirmGrant(name, reply.token);
      return {
        kind: 'granted',
        grant: { name, owner, token: reply.token, ttlMs },
        sentAt: startedAt,
      };
    }
    if (reply.kind === 'conflict') return { kind: 'conflict', conflict: reply.conflict };
    if (reply.kind === 'gone') return { kind: 'again' };
    if (reply.ahead)
      return { kind: 'predecessor', key: reply.ahead.id, endsInMs: reply.ahead.endsInMs };
    // First, and the lock was free, yet no grant (the look was refused; it cannot be now).
    if (reply.holderMs === undefined) return { kind: 'again' };
    return { kind: 'holder', ttlRemainingMs: reply.holderMs };
  }
}
