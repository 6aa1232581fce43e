import {
  type AcquireRequest,
  type AcquireResult,
  type BackendCapabilities,
  type Clock,
  DlmError,
  type Grant,
  type HolderProof,
  type LockBackend,
  type LockState,
  systemClock,
  type Timer,
  toUnavailable,
} from '@dlm/core';
import pg from 'pg';
import { type Caller, createCaller, query } from './calls.js';
import { createLockEvents, type LockEvents } from './events.js';
import { createFollowers, type Followers } from './followers.js';
import { requestMessage } from './notify-message.js';
import { postgresQueue } from './queue.js';
import { checkIdentifier, type Statements, statements } from './sql.js';

export interface PostgresBackendOptions {
  /** `postgres://user:password@host:port/database`, used when no `pool` is given. */
  url?: string;
  /**
   * Your own node-postgres pool. It stays yours (`close()` leaves it open). The adapter bounds
   * every call with `commandTimeoutMs` on its side; give the pool `statement_timeout` and
   * `connectionTimeoutMillis` as well so that the server gives up on abandoned statements too.
   * One of its connections is kept for `LISTEN`.
   */
  pool?: pg.Pool;
  /** The schema of the adapter's table and sequence, created if missing. Default `public`. */
  schema?: string;
  /** Put in front of the table, sequence and channel names. Default `dlm_`. */
  tablePrefix?: string;
  /** The longest any call may take before it fails with UNAVAILABLE. Default 2000. */
  commandTimeoutMs?: number;
  /** How often ended leases' rows are deleted, at most `sweepLimit` per run. Default 30000. */
  sweepIntervalMs?: number;
  /** Rows deleted per sweep at most. Default 1000. */
  sweepLimit?: number;
  /**
   * A sweep leaves rows that ended less than this long ago alone (a grant may be taking them
   * over; the next grant of a name overwrites its row anyway). Default 5000.
   */
  sweepMarginMs?: number;
  /** How often the LISTEN connection is checked for life. Default 5000. */
  heartbeatMs?: number;
  /**
   * How long a fair-queue entry outlives its dlm server: each server renews its entries every
   * third of this, and an entry not renewed stops counting (and is deleted) once it ends. The
   * longest a dead server's waiter holds up the queue. Default 10000.
   */
  waiterTtlMs?: number;
  clock?: Clock;
}

export interface PostgresBackend extends LockBackend {
  /**
   * Resolves once the schema exists and the LISTEN connection is in place. Rejects with
   * UNAVAILABLE when PostgreSQL cannot be reached within `commandTimeoutMs`.
   */
  ready(): Promise<void>;
  /** Deletes up to `sweepLimit` rows of ended leases now; resolves with how many. */
  sweep(): Promise<number>;
}

const DEFAULT_TIMEOUT_MS = 2_000;

function positive(value: number | undefined, fallback: number, field: string): number {
  const result = value ?? fallback;
  if (!Number.isInteger(result) || result <= 0) {
    throw new DlmError('INVALID_PARAMS', `${field} must be a positive whole number of ms`, {
      field,
    });
  }
  return result;
}

/**
 * A dlm backend on PostgreSQL: one lease table, one token sequence, NOTIFY for wake-ups. Every
 * primitive is one statement on the database's clock, so several dlm servers (or programs) can
 * share locks through one database, and held locks and tokens survive its restarts.
 *
 * @example
 * const backend = postgresBackend({ url: 'postgres://dlm@127.0.0.1:5432/dlm' });
 * await backend.ready();
 * const service = createLockService({ backend });
 */
export function postgresBackend(options: PostgresBackendOptions = {}): PostgresBackend {
  const schema = checkIdentifier(options.schema ?? 'public', 'schema', false);
  const prefix = checkIdentifier(options.tablePrefix ?? 'dlm_', 'tablePrefix', true);
  const timeoutMs = positive(options.commandTimeoutMs, DEFAULT_TIMEOUT_MS, 'commandTimeoutMs');
  const sweepIntervalMs = positive(options.sweepIntervalMs, 30_000, 'sweepIntervalMs');
  const sweepLimit = positive(options.sweepLimit, 1_000, 'sweepLimit');
  const sweepMarginMs = positive(options.sweepMarginMs, 5_000, 'sweepMarginMs');
  const heartbeatMs = positive(options.heartbeatMs, 5_000, 'heartbeatMs');
  const waiterTtlMs = positive(options.waiterTtlMs, 10_000, 'waiterTtlMs');
  if (options.pool && options.url) {
    throw new DlmError('INVALID_PARAMS', 'give either url or pool, not both', { field: 'url' });
  }
  const clock = options.clock ?? systemClock;
  const sql = statements(schema, prefix);
  const ownsPool = options.pool === undefined;
  const pool = options.pool ?? createPool(options.url, timeoutMs);
  quietErrors(pool, ownsPool);
  const call = createCaller({ pool, clock, timeoutMs, before: schemaOnce(pool, sql, timeoutMs) });
  let followers: Followers | undefined;
  // After a follower's registration: what the read says, and every change after it, is heard.
  const inspect = async (name: string) => {
    await followers?.settled(name);
    return readHolder({ sql, call, timeoutMs }, name);
  };
  let resync = () => {};
  const events = createLockEvents({
    pool,
    channel: sql.channel,
    clock,
    timeoutMs,
    heartbeatMs,
    inspect,
    // Departures from the queue may have gone unheard: every waiter looks again. Followers
    // are registered again under the new connection's pid.
    onResync: () => {
      followers?.renew();
      resync();
    },
  });
  followers = createFollowers({ sql, call, events, clock, timeoutMs });
  const p: Pg = {
    sql,
    call,
    events,
    clock,
    timeoutMs,
    sweep: { intervalMs: sweepIntervalMs, limit: sweepLimit, marginMs: sweepMarginMs },
    sweepTimer: undefined,
    closed: false,
  };
  const queue = createQueue(p, waiterTtlMs);
  resync = queue.resync;
  scheduleSweep(p);

  return {
    kind: 'postgres',
    get capabilities(): BackendCapabilities {
      return capabilities();
    },
    async ready() {
      assertOpen(p);
      const startedAt = clock.now();
      await call('open', false, async () => undefined);
      await listeningWithin(p, startedAt);
    },
    tryAcquire: (request) => tryAcquire(p, request),
    release: (proof) => release(p, proof),
    extend: (request) => extend(p, request),
    async inspect(name) {
      assertOpen(p);
      return inspect(name);
    },
    watch: (name, listener) => events.watch(name, listener),
    followChanges: (name) => (followers as Followers).follow(name),
    // Refused with UNAVAILABLE once closed (core's loop checks).
    queue: queue.queue,
    revoke: (name) => revoke(p, name),
    requestRelease: (name, reason) => requestRelease(p, name, reason),
    lockDelayOf: (name) => lockDelayOf(p, name),
    list: (namePrefix) => list(p, namePrefix),
    sweep() {
      assertOpen(p);
      return sweepNow(p);
    },
    async close() {
      if (p.closed) return;
      p.closed = true;
      p.sweepTimer?.cancel();
      followers?.close();
      await queue.close();
      await events.close();
      if (ownsPool)
        await pool.end().catch((error: unknown) => {
          throw toUnavailable(error, 'close');
        });
    },
  };
}

function capabilities(): BackendCapabilities {
  return {
    fencing: 'strict',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    // Committed rows and the sequence are WAL-logged (with synchronous_commit on, a commit
    // is on disk before it is acknowledged).
    durableAcrossRestart: true,
    // A waiters table ordered by a sequence (queue-sql.ts): FIFO across dlm servers.
    fairQueue: true,
    expiryEvents: true,
    // Shared holders as rows under the name's row lock (shared-sql.ts).
    sharedModes: true,
    // An exclusive lease's delay in its row, decided by the grant function (acquire-sql.ts).
    lockDelay: true,
    // An exclusive lease's cap in its row (`cap_at`), clamped by every extend on now().
    maxHold: true,
  };
}

function createPool(url: string | undefined, timeoutMs: number): pg.Pool {
  return new pg.Pool({
    connectionString: url ?? 'postgres://127.0.0.1:5432/postgres',
    connectionTimeoutMillis: timeoutMs,
    // The server gives up on a statement we stopped waiting for (ours time out as well).
    statement_timeout: timeoutMs,
    query_timeout: timeoutMs,
    keepAlive: true,
    application_name: 'dlm',
    max: 10,
  });
}

/**
 * A connection that breaks emits 'error': on the pool while idle, on the client while checked
 * out between statements (a FATAL "terminating connection" arrives at any time). Without a
 * listener either would end the process. The failed statement (if any) rejects on its own,
 * and a broken connection is destroyed when it is given back.
 */
function quietErrors(pool: pg.Pool, ownsPool: boolean): void {
  if (ownsPool) pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
}

/**
 * The schema, once per backend (again after a failure): nothing but two reads when its stamp is
 * current, else its statements and the new stamp in one transaction, once the advisory lock is
 * had and the stamp read again (another server may have just written it).
 */
function schemaOnce(pool: pg.Pool, sql: Statements, timeoutMs: number): () => Promise<void> {
  let schemaReady: Promise<void> | undefined;
  return () => {
    schemaReady ??= (async () => {
      const client = await pool.connect();
      let broken = false;
      try {
        if (await stampCurrent(client, sql, timeoutMs)) return;
        await query(client, 'BEGIN', [], timeoutMs);
        await query(client, sql.schemaLock, [], timeoutMs);
        if (!(await stampCurrent(client, sql, timeoutMs))) {
          for (const statement of sql.schema) await query(client, statement, [], timeoutMs);
          await query(client, sql.schemaStamp.write, [sql.schemaStamp.hash], timeoutMs);
        }
        await query(client, 'COMMIT', [], timeoutMs);
      } catch (error) {
        broken = true;
        await query(client, 'ROLLBACK', [], timeoutMs).catch(() => {});
        throw error;
      } finally {
        client.release(broken);
      }
    })().catch((error: unknown) => {
      schemaReady = undefined;
      throw error;
    });
    return schemaReady;
  };
}

/** Whether the schema's stamp is this backend's (see `SchemaStamp` in sql.ts). */
async function stampCurrent(
  client: pg.PoolClient,
  sql: Statements,
  timeoutMs: number,
): Promise<boolean> {
  const { present, read, table, hash } = sql.schemaStamp;
  const found = await query(client, present, [table], timeoutMs);
  if (!found.rows[0]?.present) return false;
  const stamp = await query(client, read, [], timeoutMs);
  return stamp.rows[0]?.stamp === hash;
}

function createQueue(p: Pg, waiterTtlMs: number) {
  return postgresQueue({
    sql: p.sql,
    call: p.call,
    events: p.events,
    clock: p.clock,
    timeoutMs: p.timeoutMs,
    waiterTtlMs,
    isClosed: () => p.closed,
    listening: (startedAt) => listeningWithin(p, startedAt),
  });
}

/** What the primitives of one PostgreSQL backend share. */
interface Pg {
  readonly sql: Statements;
  readonly call: Caller;
  readonly events: LockEvents;
  readonly clock: Clock;
  readonly timeoutMs: number;
  readonly sweep: { intervalMs: number; limit: number; marginMs: number };
  sweepTimer: Timer | undefined;
  closed: boolean;
}

function assertOpen(p: Pg): void {
  if (p.closed) throw new DlmError('UNAVAILABLE', 'the PostgreSQL backend is closed');
}

async function readHolder(
  p: Pick<Pg, 'sql' | 'call' | 'timeoutMs'>,
  name: string,
): Promise<LockState | null> {
  const result = await p.call('inspect', false, (client) =>
    query(client, p.sql.inspect, [name], p.timeoutMs),
  );
  const row = result.rows[0] as LeaseRow | undefined;
  return row ? lockState(name, row) : null;
}

/** A lease row as inspect and list read it (holders: [owner, token, ms] by token, shared). */
interface LeaseRow {
  owner: string;
  token: string;
  remaining_ms: string;
  mode: string | null;
  holder_limit: number | null;
  holders: Array<[string, string, string | number]> | null;
}

/** An exclusive lease, or shared holders (top-level fields: the highest token's); null: none. */
function lockState(name: string, row: LeaseRow): LockState | null {
  if (row.mode !== 'shared') {
    return {
      name,
      owner: row.owner,
      token: BigInt(row.token),
      ttlRemainingMs: Number(row.remaining_ms),
    };
  }
  const holders = (row.holders ?? []).map(([owner, token, ms]) => ({
    owner,
    token: BigInt(token),
    ttlRemainingMs: Number(ms),
  }));
  const top = holders.at(-1);
  // A live row marked shared without a live holder (written by an adapter from before shared
  // modes): its lease, as an exclusive one.
  if (!top) {
    return {
      name,
      owner: row.owner,
      token: BigInt(row.token),
      ttlRemainingMs: Number(row.remaining_ms),
    };
  }
  return {
    name,
    owner: top.owner,
    token: top.token,
    ttlRemainingMs: top.ttlRemainingMs,
    mode: 'shared',
    limit: row.holder_limit ?? holders.length,
    holders,
  };
}

/** Ended leases' rows, then (within the same limit) queue entries and followers of servers that stopped. */
async function sweepNow(p: Pg): Promise<number> {
  const result = await p.call('sweep', true, (client) =>
    query(client, p.sql.sweep, [p.sweep.limit, p.sweep.marginMs], p.timeoutMs),
  );
  let leases = result.rowCount ?? 0;
  if (leases >= p.sweep.limit) return leases;
  const holders = await p.call('sweep', true, (client) =>
    query(client, p.sql.sharedSweep, [p.sweep.limit - leases, p.sweep.marginMs], p.timeoutMs),
  );
  leases += holders.rowCount ?? 0;
  if (leases >= p.sweep.limit) return leases;
  const entries = await p.call('sweep', true, (client) =>
    query(client, p.sql.queueSweep, [p.sweep.limit - leases], p.timeoutMs),
  );
  leases += entries.rowCount ?? 0;
  if (leases >= p.sweep.limit) return leases;
  const gone = await p.call('sweep', true, (client) =>
    query(client, p.sql.followersSweep, [p.sweep.limit - leases], p.timeoutMs),
  );
  return leases + (gone.rowCount ?? 0);
}

function scheduleSweep(p: Pg): void {
  p.sweepTimer = p.clock.setTimer(() => {
    void sweepNow(p)
      .catch(() => {
        // Down now: the next run catches up (each run is bounded, so none grows with time).
      })
      .finally(() => {
        if (!p.closed) scheduleSweep(p);
      });
  }, p.sweep.intervalMs);
}

/**
 * Until the first LISTEN is in place, grants wait for it (a waiter must hear the release), but
 * only for the first attempt: once one failed (PostgreSQL down when the server started), calls
 * fail at once, as they do after a later outage, while the connection is tried again.
 */
async function listeningWithin(p: Pg, startedAt: number): Promise<void> {
  const { events, clock, timeoutMs } = p;
  if (events.isListening || events.connects > 0) return;
  if (events.connectFailure === undefined) {
    const left = timeoutMs - (clock.now() - startedAt);
    await new Promise<void>((resolve) => {
      const timer = clock.setTimer(resolve, left);
      void events.firstAttempt.then(() => {
        timer.cancel();
        resolve();
      });
    });
    if (events.isListening || events.connects > 0) return;
  }
  const failure = events.connectFailure;
  throw new DlmError(
    'UNAVAILABLE',
    failure === undefined
      ? `PostgreSQL: no LISTEN connection within ${timeoutMs} ms`
      : `not connected to PostgreSQL (${failure}; reconnecting)`,
  );
}

/**
 * A try-lock, in either mode: one call of the adapter's grant function (acquire-sql.ts), which
 * decides under the name's row lock and says why it refused.
 */
async function tryAcquire(p: Pg, request: AcquireRequest): Promise<AcquireResult> {
  assertOpen(p);
  const { name, owner, ttlMs, keyHash } = request;
  const shared = request.mode === 'shared';
  await listeningWithin(p, p.clock.now());
  const result = await p.call('acquire', true, (client) =>
    query(
      client,
      p.sql.acquire,
      [
        name,
        owner,
        ttlMs,
        keyHash ?? null,
        shared,
        shared ? request.limit : 1,
        request.lockDelayMs ?? 0,
        request.maxHoldMs ?? 0,
      ],
      p.timeoutMs,
      p.sql.named('acquire'),
    ),
  );
  const row = result.rows[0] as AcquireRow;
  if (row.granted && row.token !== null) {
    const token = BigInt(row.token);
    // A refresh of a capped lease runs to its cap at most.
    const grantedMs = row.granted_ms == null ? ttlMs : Math.min(ttlMs, Number(row.granted_ms));
    p.events.noteLease(
      name,
      shared ? { token, owner, mode: 'shared' } : { token, owner },
      grantedMs,
    );
    return { granted: true, grant: { name, owner, token, ttlMs: grantedMs, ...holdLeft(row) } };
  }
  p.events.learn(name);
  return refusalOf(row);
}

/** What the grant function answers (acquire-sql.ts). */
interface AcquireRow {
  granted: boolean;
  token: string | null;
  remaining_ms: string | null;
  conflict: 'mode' | 'limit' | null;
  conflict_limit: number | null;
  holders: number | null;
  /** Free, but in its lock-delay: `remaining_ms` is the delay left. */
  delayed: boolean;
  /** A refresh: the ms the lease now runs (clamped to its cap on holding). */
  granted_ms: string | null;
  /** A refresh of a capped lease: the ms left to its cap. */
  hold_ms: string | null;
}

/** A row's ms left to a cap on holding, as a grant's field (none: no cap). */
function holdLeft(row: { hold_ms: string | null }): { holdRemainingMs?: number } {
  return row.hold_ms == null ? {} : { holdRemainingMs: Number(row.hold_ms) };
}

/** A refusal as the contract words it, from a grant function's row. */
function refusalOf(row: AcquireRow): AcquireResult {
  if (row.conflict === 'mode') return { granted: false, conflict: { field: 'mode' } };
  if (row.conflict === 'limit') {
    return { granted: false, conflict: { field: 'limit', limit: Number(row.conflict_limit) } };
  }
  if (row.remaining_ms == null) return { granted: false };
  const ttlRemainingMs = Number(row.remaining_ms);
  if (row.delayed) return { granted: false, ttlRemainingMs, lockDelayRemainingMs: ttlRemainingMs };
  return { granted: false, ttlRemainingMs };
}

/** How long `name`'s lock-delay has left (0: none, or held). */
async function lockDelayOf(p: Pg, name: string): Promise<number> {
  assertOpen(p);
  const result = await p.call('inspect', false, (client) =>
    query(client, p.sql.lockDelay, [name], p.timeoutMs),
  );
  const row = result.rows[0] as { ms: string } | undefined;
  return row ? Number(row.ms) : 0;
}

async function release(p: Pg, { name, token, keyHash }: HolderProof): Promise<boolean> {
  assertOpen(p);
  const result = await p.call('release', true, (client) =>
    query(
      client,
      p.sql.release,
      [name, token.toString(), keyHash ?? null],
      p.timeoutMs,
      p.sql.named('release'),
    ),
  );
  const row = result.rows[0] as { live: boolean | null; owner: string | null } | undefined;
  if (row?.live !== true || row.owner === null) return false;
  // This server's waiters need not wait for the NOTIFY to hear of it.
  p.events.happened({ t: 'released', n: name, k: token.toString(), o: row.owner });
  return true;
}

async function extend(
  p: Pg,
  { name, token, ttlMs, keyHash }: HolderProof & { ttlMs: number },
): Promise<Grant | null> {
  assertOpen(p);
  const result = await p.call('extend', true, (client) =>
    query(client, p.sql.extend, [name, token.toString(), ttlMs, keyHash ?? null], p.timeoutMs),
  );
  const row = result.rows[0] as
    | { owner: string; shared: boolean; ttl_ms: string | null; hold_ms: string | null }
    | undefined;
  if (!row) return null;
  // Extended up to the lease's cap on holding only (whole ms, rounded down, said only then).
  const grantedMs = row.hold_ms == null ? ttlMs : Math.min(ttlMs, Number(row.ttl_ms));
  p.events.noteLease(
    name,
    row.shared ? { token, owner: row.owner, mode: 'shared' } : { token, owner: row.owner },
    grantedMs,
  );
  return { name, owner: row.owner, token, ttlMs: grantedMs, ...holdLeft(row) };
}

async function revoke(p: Pg, name: string): Promise<boolean> {
  assertOpen(p);
  const result = await p.call('revoke', true, (client) =>
    query(client, p.sql.revoke, [name], p.timeoutMs),
  );
  return (result.rows[0] as { live: boolean } | undefined)?.live === true;
}

/** A NOTIFY on the events channel, which every dlm server sharing the database LISTENs to. */
async function requestRelease(p: Pg, name: string, reason: string | undefined): Promise<void> {
  assertOpen(p);
  await p.call('requestRelease', true, (client) =>
    query(
      client,
      'SELECT pg_notify($1, $2)',
      [p.sql.channel, requestMessage(name, reason)],
      p.timeoutMs,
    ),
  );
}

async function list(p: Pg, namePrefix: string): Promise<LockState[]> {
  assertOpen(p);
  const result = await p.call('list', false, (client) =>
    query(client, p.sql.list, [namePrefix], p.timeoutMs),
  );
  const states: LockState[] = [];
  for (const row of result.rows as Array<LeaseRow & { name: string }>) {
    const state = lockState(row.name, row);
    if (state) states.push(state);
  }
  return states;
}
