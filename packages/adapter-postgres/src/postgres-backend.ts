import {
  type BackendCapabilities,
  type Clock,
  DlmError,
  type LockBackend,
  type LockState,
  systemClock,
  type Timer,
  toUnavailable,
} from '@dlm/core';
import pg from 'pg';
import { createCaller, query } from './calls.js';
import { createLockEvents } from './events.js';
import { checkIdentifier, statements } from './sql.js';

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
  if (options.pool && options.url) {
    throw new DlmError('INVALID_PARAMS', 'give either url or pool, not both', { field: 'url' });
  }
  const clock = options.clock ?? systemClock;
  const sql = statements(schema, prefix);
  const ownsPool = options.pool === undefined;
  const pool =
    options.pool ??
    new pg.Pool({
      connectionString: options.url ?? 'postgres://127.0.0.1:5432/postgres',
      connectionTimeoutMillis: timeoutMs,
      // The server gives up on a statement we stopped waiting for (ours time out as well).
      statement_timeout: timeoutMs,
      query_timeout: timeoutMs,
      keepAlive: true,
      application_name: 'dlm',
      max: 10,
    });
  // A connection that breaks emits 'error': on the pool while idle, on the client while checked
  // out between statements (a FATAL "terminating connection" arrives at any time). Without a
  // listener either would end the process. The failed statement (if any) rejects on its own,
  // and a broken connection is destroyed when it is given back.
  if (ownsPool) pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });

  let schemaReady: Promise<void> | undefined;
  /** The schema, once per backend (again after a failure). */
  function ensureSchema(): Promise<void> {
    schemaReady ??= (async () => {
      const client = await pool.connect();
      let broken = false;
      try {
        await query(client, 'BEGIN', [], timeoutMs);
        for (const statement of sql.schema) await query(client, statement, [], timeoutMs);
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
  }

  const call = createCaller({ pool, clock, timeoutMs, before: ensureSchema });

  async function inspect(name: string): Promise<LockState | null> {
    const result = await call('inspect', false, (client) =>
      query(client, sql.inspect, [name], timeoutMs),
    );
    const row = result.rows[0] as
      | { owner: string; token: string; remaining_ms: string }
      | undefined;
    if (!row) return null;
    return {
      name,
      owner: row.owner,
      token: BigInt(row.token),
      ttlRemainingMs: Number(row.remaining_ms),
    };
  }

  const events = createLockEvents({
    pool,
    channel: sql.channel,
    clock,
    timeoutMs,
    heartbeatMs,
    inspect,
  });

  async function sweep(): Promise<number> {
    const result = await call('sweep', true, (client) =>
      query(client, sql.sweep, [sweepLimit, sweepMarginMs], timeoutMs),
    );
    return result.rowCount ?? 0;
  }

  let sweepTimer: Timer | undefined;
  function scheduleSweep(): void {
    sweepTimer = clock.setTimer(() => {
      void sweep()
        .catch(() => {
          // Down now: the next run catches up (each run is bounded, so none grows with time).
        })
        .finally(() => {
          if (!closed) scheduleSweep();
        });
    }, sweepIntervalMs);
  }
  scheduleSweep();

  let closed = false;
  function assertOpen(): void {
    if (closed) throw new DlmError('UNAVAILABLE', 'the PostgreSQL backend is closed');
  }

  /** Until the first LISTEN is in place, grants wait for it (a waiter must hear the release). */
  async function listeningWithin(startedAt: number): Promise<void> {
    if (events.isListening || events.connects > 0) return;
    const left = timeoutMs - (clock.now() - startedAt);
    const ok = await new Promise<boolean>((resolve) => {
      const timer = clock.setTimer(() => resolve(false), left);
      void events.listening.then(() => {
        timer.cancel();
        resolve(true);
      });
    });
    if (!ok) {
      throw new DlmError('UNAVAILABLE', `PostgreSQL: no LISTEN connection within ${timeoutMs} ms`);
    }
  }

  return {
    kind: 'postgres',

    get capabilities(): BackendCapabilities {
      return {
        fencing: 'strict',
        minTtlMs: 1,
        ttlGranularityMs: 1,
        // Committed rows and the sequence are WAL-logged (with synchronous_commit on, a commit
        // is on disk before it is acknowledged).
        durableAcrossRestart: true,
        // Waiters are queued by each dlm server's core; a waiters table ordered by a sequence
        // (a fair queue across servers) is not built yet.
        fairQueue: false,
        expiryEvents: true,
      };
    },

    async ready() {
      assertOpen();
      const startedAt = clock.now();
      await call('open', false, async () => undefined);
      await listeningWithin(startedAt);
    },

    async tryAcquire({ name, owner, ttlMs, keyHash }) {
      assertOpen();
      const startedAt = clock.now();
      await listeningWithin(startedAt);
      const result = await call('acquire', true, (client) =>
        query(client, sql.acquire, [name, owner, ttlMs, keyHash ?? null], timeoutMs),
      );
      const row = result.rows[0] as
        | { granted: boolean; token: string | null; remaining_ms: string | null }
        | undefined;
      if (row?.granted && row.token !== null) {
        const token = BigInt(row.token);
        events.noteLease(name, { token, owner }, ttlMs);
        return { granted: true, grant: { name, owner, token, ttlMs } };
      }
      events.learn(name);
      return row?.remaining_ms == null
        ? { granted: false }
        : { granted: false, ttlRemainingMs: Number(row.remaining_ms) };
    },

    async release({ name, token, keyHash }) {
      assertOpen();
      const result = await call('release', true, (client) =>
        query(client, sql.release, [name, token.toString(), keyHash ?? null], timeoutMs),
      );
      return (result.rows[0] as { live: boolean } | undefined)?.live === true;
    },

    async extend({ name, token, ttlMs, keyHash }) {
      assertOpen();
      const result = await call('extend', true, (client) =>
        query(client, sql.extend, [name, token.toString(), ttlMs, keyHash ?? null], timeoutMs),
      );
      const row = result.rows[0] as { owner: string } | undefined;
      if (!row) return null;
      events.noteLease(name, { token, owner: row.owner }, ttlMs);
      return { name, owner: row.owner, token, ttlMs };
    },

    async inspect(name) {
      assertOpen();
      return inspect(name);
    },

    watch(name, listener) {
      return events.watch(name, listener);
    },

    async revoke(name) {
      assertOpen();
      const result = await call('revoke', true, (client) =>
        query(client, sql.revoke, [name], timeoutMs),
      );
      return (result.rows[0] as { live: boolean } | undefined)?.live === true;
    },

    async list(namePrefix) {
      assertOpen();
      const result = await call('list', false, (client) =>
        query(client, sql.list, [namePrefix], timeoutMs),
      );
      return (
        result.rows as Array<{ name: string; owner: string; token: string; remaining_ms: string }>
      ).map((row) => ({
        name: row.name,
        owner: row.owner,
        token: BigInt(row.token),
        ttlRemainingMs: Number(row.remaining_ms),
      }));
    },

    sweep() {
      assertOpen();
      return sweep();
    },

    async close() {
      if (closed) return;
      closed = true;
      sweepTimer?.cancel();
      await events.close();
      if (ownsPool)
        await pool.end().catch((error: unknown) => {
          throw toUnavailable(error, 'close');
        });
    },
  };
}
