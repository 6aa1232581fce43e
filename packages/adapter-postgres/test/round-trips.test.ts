import { lockName, sleep, until } from '@dlm/conformance';
import { createLockService, type LockChange, type LockService } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PostgresBackend } from '../src/index.js';
import { usePostgres } from './support.js';

/**
 * The cost of an uncontended pair, pinned (issue 29, target 5): through core's service, as the
 * server drives it, a free name's acquire is ONE statement and its release ONE statement, and
 * neither sends a NOTIFY while nobody waits on or watches the name (a NOTIFY serialises the
 * database's notifying commits). Statements are counted on the backend's own pool, each one a
 * round trip to the real PostgreSQL; notifications by a LISTEN of the test's own.
 */

const PREFIX = 'trips_';

describe.skipIf(!postgresAvailable())('postgres: round trips of an uncontended pair', () => {
  const { postgres, admin, open } = usePostgres(PREFIX);
  /** Statements sent on the measured backend's pool while `counting`. */
  const sent: string[] = [];
  let counting = false;
  let pool: pg.Pool;
  let backend: PostgresBackend;
  let service: LockService;
  const heard: string[] = [];

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: postgres().url, max: 4 });
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
        if (counting) {
          const text = typeof config === 'string' ? config : (config as { text: string }).text;
          sent.push(text);
        }
        return query(config, ...rest);
      };
    });
    // No heartbeat in the window: the LISTEN connection is on the same pool.
    backend = await open({ pool, heartbeatMs: 600_000 });
    service = createLockService({ backend });
    admin().on('notification', (message) => heard.push(message.payload ?? ''));
    await admin().query(`LISTEN "${PREFIX}events"`);
  });
  afterAll(async () => {
    await service.close();
    // Its LISTEN connection goes back to the pool first.
    await backend.close();
    await pool.end();
  });

  /** The statements and notifications of `work`, once what it set off has settled. */
  async function measured(work: () => Promise<void>) {
    await sleep(100);
    sent.length = 0;
    heard.length = 0;
    counting = true;
    await work();
    // A NOTIFY reaches the admin connection right after its commit: give it time to show.
    await sleep(300);
    counting = false;
    return { statements: [...sent], notifications: [...heard] };
  }

  async function pairs(count: number, waitMs: number, extra?: (name: string) => Promise<void>) {
    for (let i = 0; i < count; i++) {
      const name = lockName('trip');
      const lease = await service.acquire({ name, owner: `o${i}`, ttlMs: 10_000, waitMs });
      await extra?.(name);
      await service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
    }
  }

  it('a try-lock and its release: one statement each, no NOTIFY', async () => {
    const { statements, notifications } = await measured(() => pairs(5, 0));
    expect(statements).toHaveLength(10);
    expect(notifications).toEqual([]);
  });

  it('an acquire that may wait, granted at once, and its release: one statement each, no NOTIFY', async () => {
    const { statements, notifications } = await measured(() => pairs(5, 5_000));
    expect(statements).toHaveLength(10);
    expect(notifications).toEqual([]);
  });

  it('the count sees every statement: one more read per pair is counted', async () => {
    const { statements } = await measured(() =>
      pairs(3, 0, async (name) => {
        await service.get(name);
      }),
    );
    expect(statements).toHaveLength(9);
  });

  it('a name watched through another server: its grant and release are announced', async () => {
    const other = createLockService({ backend: await open() });
    const name = lockName('trip-watched');
    const changes: LockChange[] = [];
    const stop = other.watch(name, (change) => changes.push(change));
    await other.get(name);
    const { notifications } = await measured(async () => {
      const lease = await service.acquire({ name, owner: 'w', ttlMs: 10_000 });
      await until(() => changes.length >= 1, 2_000);
      await service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
      await until(() => changes.length >= 2, 2_000);
    });
    stop();
    await other.close();
    expect(notifications.map((payload) => JSON.parse(payload).t)).toEqual(['acquired', 'released']);
    expect(changes.map((change) => change.type)).toEqual(['acquired', 'released']);
  });
});
