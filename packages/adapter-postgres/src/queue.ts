import type * as core from '@dlm/core';
import { queueWaits, queueWatch } from '@dlm/core';
import { type Caller, query } from './calls.js';
import type { LockEvents } from './events.js';
import type { Statements } from './sql.js';

/**
 * PostgreSQL's queue driver: core's wait loop runs over it, with this server's entries renewed
 * by the loop (`renewal`). The queue is the waiters table (queue-sql.ts); join, look, leave and
 * renew are one statement each, for both modes, and a grant is the adapter's one grant function
 * (acquire-sql.ts). A waiter sleeps on the entry just ahead of its own (a `left` notification
 * wakes only the waiter behind it) or, at the head, on the holders (a release, revocation or
 * expiry event, with the holder's remaining lease as the fallback timer). An entry ahead whose
 * dlm server stopped renewing it stops counting at its end on the database's clock: the loop
 * looks again then (the look deletes it).
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
}

export function postgresQueue(context: QueueContext) {
  const { call, sql, timeoutMs, waiterTtlMs, events } = context;
  const waits = queueWaits();
  const queue: core.BackendQueue = {
    clock: context.clock,
    // Releases and expiries arrive as events; the timer only covers a missed one.
    expirySlackMs: 250,
    // After an entry ahead should have ended, look this much later (its end is the database's).
    aheadSlackMs: 100,
    renewal: {
      waiterTtlMs,
      // One statement for all of this server's entries; the LISTEN connection's pid goes with it.
      renew: (byName) =>
        call('renew', true, (client) =>
          query(
            client,
            sql.queueRenew,
            [[...byName.values()].flat(), waiterTtlMs, events.sessionPid ?? null],
            timeoutMs,
          ),
        ),
    },
    isClosed: context.isClosed,
    attach: waits.attach,
    watch: queueWatch(
      (name, listener) => events.watch(name, listener),
      (name, left) =>
        events.watchQueue(name, ({ id, grantedMs }) =>
          left({ what: 'entry-left', key: id, grantedMs }),
        ),
    ),
    driver: (request) => new PostgresWaiter(context, request),
    count: async (name) => (await countQueued(context, name, null)) ?? 0,
  };
  return {
    queue,
    /** The LISTEN connection came back: the entries get its pid, and every waiter looks again. */
    resync: () => waits.resync(),
    close: () => waits.close(),
  };
}

/** What a join or a look answers (queue-sql.ts). */
interface StepRow {
  granted: boolean;
  token: string | null;
  conflict: 'mode' | 'limit' | null;
  conflict_limit: number | null;
  wait_id: string | null;
  wait_ms: string | null;
  holder_ms: string | null;
}

/** One queued acquire: its entry's id while queued. */
class PostgresWaiter implements core.QueueDriver {
  private id: string | undefined;
  private readonly shared: boolean;
  private readonly limit: number;

  constructor(
    private readonly context: QueueContext,
    private readonly request: core.AcquireRequest,
  ) {
    this.shared = request.mode === 'shared';
    this.limit = this.shared ? (request.limit ?? 1) : 1;
  }

  entry(): string | undefined {
    return this.id;
  }

  stop(): void {}

  /** If this fails, the entry is no longer renewed: it ends within `waiterTtlMs`. */
  async leave(id: string): Promise<void> {
    const { call, sql, timeoutMs } = this.context;
    if (this.id === id) this.id = undefined;
    await call('dequeue', true, (client) => query(client, sql.queueLeave, [id], timeoutMs));
  }

  /** The live entries up to mine (ids order the queue): my place, while mine counts. */
  async position(): Promise<number | undefined> {
    const id = this.id;
    if (id === undefined) return undefined;
    return (await countQueued(this.context, this.request.name, id)) ?? undefined;
  }

  async join(): Promise<core.QueueStep> {
    const { call, sql, clock, timeoutMs, waiterTtlMs, events } = this.context;
    const startedAt = clock.now();
    await this.context.listening(startedAt);
    const params = [...this.params(), waiterTtlMs, events.sessionPid ?? null];
    const result = await call('acquire', true, (client) =>
      query(
        client,
        sql.queueJoin,
        [...params, this.shared, this.limit, this.delayMs(), this.holdMs()],
        timeoutMs,
        sql.named('join'),
      ),
    );
    const row = result.rows[0] as StepRow & { waiter: string | null };
    // A conflict queues nothing; otherwise not granted means queued.
    if (row.waiter !== null) this.id = row.waiter;
    return this.step(row, startedAt);
  }

  async look(): Promise<core.QueueStep> {
    const { call, sql, clock, timeoutMs } = this.context;
    const id = this.id;
    if (id === undefined) return { kind: 'again' };
    const startedAt = clock.now();
    const result = await call('acquire', true, (client) =>
      query(
        client,
        sql.queueLook,
        [...this.params(), id, this.shared, this.limit, this.delayMs(), this.holdMs()],
        timeoutMs,
        sql.named('look'),
      ),
    );
    const row = result.rows[0] as StepRow & { mine: boolean };
    // Granted: the statement deleted our entry with the grant.
    if (row.granted) this.id = undefined;
    else if (!row.mine) {
      // Our entry ended (this server could not renew it in time): others passed it, so join
      // again at the back, once what is left of it is gone.
      await this.leave(id);
      return { kind: 'again' };
    }
    return this.step(row, startedAt);
  }

  private delayMs(): number {
    return this.request.lockDelayMs ?? 0;
  }

  private holdMs(): number {
    return this.request.maxHoldMs ?? 0;
  }

  private params(): unknown[] {
    const { name, owner, ttlMs, keyHash } = this.request;
    return [name, owner, ttlMs, keyHash ?? null];
  }

  /** A grant (its lease counted from the statement's start), a conflict, or what to sleep on. */
  private step(row: StepRow, startedAt: number): core.QueueStep {
    const { name, owner, ttlMs } = this.request;
    if (row.granted && row.token !== null) {
      const token = BigInt(row.token);
      this.context.events.noteLease(name, { token, owner }, ttlMs);
      return { kind: 'granted', grant: { name, owner, token, ttlMs }, sentAt: startedAt };
    }
    if (row.conflict === 'mode') return { kind: 'conflict', conflict: { field: 'mode' } };
    if (row.conflict === 'limit') {
      return { kind: 'conflict', conflict: { field: 'limit', limit: Number(row.conflict_limit) } };
    }
    if (row.wait_id !== null) {
      return { kind: 'predecessor', key: row.wait_id, endsInMs: Number(row.wait_ms) };
    }
    if (row.holder_ms === null) return { kind: 'again' };
    return { kind: 'holder', ttlRemainingMs: Number(row.holder_ms) };
  }
}

/**
 * The live entries of `name`'s queue, or those up to the entry `upTo` (null once that entry no
 * longer counts), in one statement.
 */
async function countQueued(context: QueueContext, name: string, upTo: string | null) {
  const { call, sql, timeoutMs } = context;
  const result = await call('inspect', false, (client) =>
    query(client, sql.queueCount, [name, upTo], timeoutMs),
  );
  const { n } = result.rows[0] as { n: number | null };
  return n === null ? null : Number(n);
}
