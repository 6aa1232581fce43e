import type * as core from '@dlm/core';
import { createRenewedFairQueue, DlmError } from '@dlm/core';
import { type Caller, query } from './calls.js';
import type { LockEvents } from './events.js';
import type { Statements } from './sql.js';

/**
 * The cross-server fair queue on PostgreSQL: core's wait loop over entries this server renews
 * (`createRenewedFairQueue`) with a driver whose queue is the waiters table (queue-sql.ts). A
 * waiter sleeps on the entry just ahead of its own (a `left` notification wakes only the waiter
 * behind it) or, at the head, on the holder (its release, revocation or expiry event, with the
 * holder's remaining lease as the fallback timer). An entry ahead whose dlm server stopped
 * renewing it stops counting at its end on the database's clock: a timer at that end makes the
 * waiter look again (the look deletes it).
 */

/** What the queue needs from the backend it belongs to. */
export interface QueueContext {
  sql: Statements;
  call: Caller;
  events: LockEvents;
  clock: core.Clock;
  timeoutMs: number;
  /** How long an entry stays live without its server's renewal. */
  waiterTtlMs: number;
  isClosed(): boolean;
  /** Resolves once the first LISTEN is in place (rejects after the call's bound). */
  listening(startedAt: number): Promise<void>;
  /** Gives back a lease granted too late to be reported. */
  release(grant: core.Grant, keyHash: string | undefined): Promise<unknown>;
}

/**
 * The queue of a PostgreSQL backend. Its `resync` is for a LISTEN connection that came back: the
 * entries get its pid, and every sleeping waiter looks again (departures may have gone unheard).
 */
export type PostgresQueue = core.RenewedFairQueue;

export function postgresQueue(context: QueueContext): PostgresQueue {
  const { call, sql, timeoutMs, waiterTtlMs } = context;
  return createRenewedFairQueue({
    clock: context.clock,
    backend: 'PostgreSQL',
    isClosed: context.isClosed,
    // Releases and expiries arrive as events; the timer only covers a missed one.
    expirySlackMs: 250,
    // After an entry ahead should have ended, look this much later (its end is the database's).
    aheadSlackMs: 100,
    waiterTtlMs,
    // One statement for all of this server's entries; the LISTEN connection's pid goes with it.
    renew: (byName) =>
      call('renew', true, (client) =>
        query(
          client,
          sql.queueRenew,
          [[...byName.values()].flat(), waiterTtlMs, context.events.sessionPid ?? null],
          timeoutMs,
        ),
      ),
    driver: (request, watcher, entry) => new PostgresWaiter(context, entry, request, watcher),
  });
}

interface AheadRow {
  ahead: string | null;
  ahead_ms: string | null;
  holder_ms: string | null;
}

interface JoinRow extends AheadRow {
  token: string | null;
  waiter: string | null;
  mine_shared: boolean;
}

interface LookRow extends AheadRow {
  mine: boolean;
  token: string | null;
  mine_shared: boolean;
}

/** What a shared join answers (queue-sql.ts `sharedJoin`). */
interface SharedJoinRow {
  granted: boolean;
  token: string | null;
  conflict: 'mode' | 'limit' | null;
  conflict_limit: number | null;
  waiter: string | null;
}

/** What a shared look answers (queue-sql.ts `sharedLook`). */
interface SharedLookRow extends SharedJoinRow {
  mine: boolean;
  remaining_ms: string | null;
  holders: number | null;
  exclusive: string | null;
  exclusive_ms: string | null;
  reader: string | null;
  reader_ms: string | null;
}

function conflictOf(row: SharedJoinRow): core.QueueStep | undefined {
  if (row.conflict === 'mode') return { kind: 'conflict', conflict: { field: 'mode' } };
  if (row.conflict === 'limit') {
    return { kind: 'conflict', conflict: { field: 'limit', limit: Number(row.conflict_limit) } };
  }
  return undefined;
}

/** One queued acquire: its entry's id while queued, and what it sleeps on. */
class PostgresWaiter implements core.RenewedQueueDriver {
  /**
   * The entry we slept on left with the lock, and nothing was heard of the lock since: we are
   * at the head behind a holder whose lease is this long, known without asking the database.
   */
  private promoted: { ttlMs: number } | undefined;
  private readonly unsubscribe: core.Unsubscribe[];

  constructor(
    private readonly context: QueueContext,
    private readonly entry: core.QueueEntry,
    private readonly request: core.AcquireRequest,
    watcher: core.QueueWatcher,
  ) {
    const { events } = context;
    this.unsubscribe = [
      events.watch(request.name, (event) => {
        if (event.type === 'acquired') return;
        this.promoted = undefined;
        // This server's oldest waiter also looks when it sleeps on an entry ahead: if that
        // entry's server died (its connection is gone), nobody else would tell it before the
        // entry's end. One look per server per release at most. (The first entry added is the
        // oldest: joins of one name take turns here, and ids come from a sequence.)
        const first = entry.first();
        watcher.changed((step) => step.kind === 'holder' || first);
      }),
      events.watchQueue(request.name, ({ id, grantedMs }) => {
        const woken = watcher.changed((step) => step.kind === 'predecessor' && step.key === id);
        // A shared waiter may be granted beside the entry that left with the lock: it looks.
        if (woken && grantedMs !== undefined && request.mode !== 'shared') {
          this.promoted = { ttlMs: grantedMs };
        }
      }),
    ];
  }

  stop(): void {
    for (const stop of this.unsubscribe) stop();
  }

  /** If this fails, the entry is no longer renewed: it ends within `waiterTtlMs`. */
  async leave(): Promise<void> {
    const id = this.entry.take();
    const { call, sql, timeoutMs } = this.context;
    await call('dequeue', true, (client) => query(client, sql.queueLeave, [id], timeoutMs));
    this.left(id);
  }

  /** Our entry left the queue: this server's waiter behind it hears so at once. */
  private left(id: string | undefined, grantedMs?: number): void {
    if (id === undefined) return;
    const { name } = this.request;
    this.context.events.happened(
      grantedMs === undefined
        ? { t: 'left', n: name, k: id }
        : { t: 'left', n: name, k: id, o: 'granted', ms: grantedMs },
    );
  }

  async join(): Promise<core.QueueStep> {
    const { call, sql, clock, timeoutMs, waiterTtlMs } = this.context;
    const startedAt = clock.now();
    await this.context.listening(startedAt);
    if (this.request.mode === 'shared') {
      const result = await call('acquire', true, (client) =>
        query(
          client,
          sql.sharedJoin,
          [
            ...this.params(),
            waiterTtlMs,
            this.context.events.sessionPid ?? null,
            this.request.limit,
          ],
          timeoutMs,
        ),
      );
      const row = result.rows[0] as SharedJoinRow;
      if (row.granted && row.token !== null) return this.granted(BigInt(row.token), startedAt);
      const conflict = conflictOf(row);
      if (conflict) return conflict;
      if (row.waiter !== null) this.entry.set(row.waiter);
      // The first look follows at once: it finds what to sleep on.
      return { kind: 'again' };
    }
    const result = await call('acquire', true, (client) =>
      query(
        client,
        sql.queueJoin,
        [...this.params(), waiterTtlMs, this.context.events.sessionPid ?? null],
        timeoutMs,
      ),
    );
    const row = result.rows[0] as JoinRow;
    if (row.token !== null) return this.granted(BigInt(row.token), startedAt);
    if (row.mine_shared) {
      await this.leaveIfQueued(row.waiter);
      return { kind: 'conflict', conflict: { field: 'mode' } };
    }
    if (row.waiter === null) return { kind: 'again' };
    this.entry.set(row.waiter);
    return this.sleepOn(row);
  }

  async look(): Promise<core.QueueStep> {
    const promoted = this.promoted;
    this.promoted = undefined;
    // The grant's own statement checks everything again when the holder goes.
    if (promoted) return { kind: 'holder', ttlRemainingMs: promoted.ttlMs };
    if (this.request.mode === 'shared') return this.lookShared();
    const { call, sql, clock, timeoutMs } = this.context;
    const startedAt = clock.now();
    const result = await call('acquire', true, (client) =>
      query(client, sql.queueLook, [...this.params(), this.entry.id], timeoutMs),
    );
    const row = result.rows[0] as LookRow;
    if (row.token === null && row.mine_shared) {
      return { kind: 'conflict', conflict: { field: 'mode' } };
    }
    if (row.token !== null) {
      // The statement deleted our entry with the grant.
      this.left(this.entry.id, this.request.ttlMs);
      this.entry.set(undefined);
      return this.granted(BigInt(row.token), startedAt);
    }
    if (!row.mine) {
      // Our entry ended (this server could not renew it in time): others passed it, so join
      // again at the back, once what is left of it is gone.
      await this.leave();
      return { kind: 'again' };
    }
    return this.sleepOn(row);
  }

  /** fair-queue.ts's shared predicate, in one statement (queue-sql.ts `sharedLook`). */
  private async lookShared(): Promise<core.QueueStep> {
    const { call, sql, clock, timeoutMs } = this.context;
    const startedAt = clock.now();
    if (this.entry.id === undefined) return { kind: 'again' };
    const result = await call('acquire', true, (client) =>
      query(
        client,
        sql.sharedLook,
        [...this.params(), this.entry.id, this.request.limit],
        timeoutMs,
      ),
    );
    const row = result.rows[0] as SharedLookRow;
    if (row.granted && row.token !== null) {
      this.left(this.entry.id, this.request.ttlMs);
      this.entry.set(undefined);
      return this.granted(BigInt(row.token), startedAt);
    }
    const conflict = conflictOf(row);
    if (conflict) return conflict;
    if (!row.mine) {
      await this.leave();
      return { kind: 'again' };
    }
    if (row.exclusive !== null) {
      return this.sleepOn({ ahead: row.exclusive, ahead_ms: row.exclusive_ms, holder_ms: null });
    }
    const limit = this.request.limit ?? 1;
    // Room now, taken by the shared entries ahead: the nearest of them goes first.
    if (row.reader !== null && (row.holders ?? 0) < limit) {
      return this.sleepOn({ ahead: row.reader, ahead_ms: row.reader_ms, holder_ms: null });
    }
    if (row.remaining_ms !== null)
      return this.sleepOn({ ahead: null, ahead_ms: null, holder_ms: row.remaining_ms });
    if (row.reader !== null) {
      return this.sleepOn({ ahead: row.reader, ahead_ms: row.reader_ms, holder_ms: null });
    }
    return { kind: 'again' };
  }

  /** A conflicting join that queued an entry takes it out again. */
  private async leaveIfQueued(waiter: string | null): Promise<void> {
    if (waiter === null) return;
    this.entry.set(waiter);
    await this.leave();
  }

  private params(): unknown[] {
    const { name, owner, ttlMs, keyHash } = this.request;
    return [name, owner, ttlMs, keyHash ?? null];
  }

  /** What the statement found ahead of our entry: an entry, the holder, or nothing (again). */
  private sleepOn(row: AheadRow): core.QueueStep {
    this.promoted = undefined;
    return this.entry.sleepOn({
      ahead: row.ahead === null ? undefined : { id: row.ahead, endsInMs: Number(row.ahead_ms) },
      holderMs: row.holder_ms === null ? undefined : Number(row.holder_ms),
    });
  }

  /** No grant is reported whose lease may already have run out. */
  private async granted(token: bigint, startedAt: number): Promise<core.QueueStep> {
    const { name, owner, ttlMs, keyHash } = this.request;
    const { clock, events } = this.context;
    const grant: core.Grant = { name, owner, token, ttlMs };
    events.noteLease(name, { token, owner }, ttlMs);
    if (clock.now() - startedAt < ttlMs) return { kind: 'granted', grant };
    await this.context.release(grant, keyHash).catch(() => undefined);
    throw new DlmError('UNAVAILABLE', 'PostgreSQL answered after the lease had already run out', {
      indeterminate: true,
    });
  }
}
