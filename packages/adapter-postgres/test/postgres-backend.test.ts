import { expectRefusedAtOnce, failure, granted, lockName, sleep, until } from '@dlm/conformance';
import { isDlmError, type LockEvent } from '@dlm/core';
import { postgresAvailable, postgresManaged } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { type PostgresBackend, postgresBackend } from '../src/index.js';
import { usePostgres, watchFollowed } from './support.js';

const run = postgresAvailable();

describe.skipIf(!run)('postgres backend', () => {
  const { postgres, admin, reconnectAdmin, open } = usePostgres('unit_');
  async function rows(name: string, prefix = 'unit_'): Promise<number> {
    const result = await admin().query(
      `SELECT count(*)::int AS n FROM ${prefix}leases WHERE name = $1`,
      [name],
    );
    return (result.rows[0] as { n: number }).n;
  }

  it('rejects a schema or prefix it cannot quote, and bad timeouts, with INVALID_PARAMS', () => {
    for (const [options, field] of [
      [{ schema: 'Bad-Name' }, 'schema'],
      [{ tablePrefix: 'x"; DROP TABLE y; --' }, 'tablePrefix'],
      [{ commandTimeoutMs: 0 }, 'commandTimeoutMs'],
      [{ sweepLimit: 1.5 }, 'sweepLimit'],
    ] as const) {
      let caught: unknown;
      try {
        postgresBackend({ url: 'postgres://127.0.0.1:1/x', ...options });
      } catch (error) {
        caught = error;
      }
      expect(isDlmError(caught, 'INVALID_PARAMS')).toBe(true);
      expect((caught as { details: { field: string } }).details.field).toBe(field);
    }
  });

  it('declares a fair queue and shared modes', async () => {
    expect((await open()).capabilities).toMatchObject({ fairQueue: true, sharedModes: true });
  });

  it('never grants a reader beside a live row marked shared that has no live holder', async () => {
    const backend = await open();
    const name = lockName('foreign-row');
    // What an older adapter leaves: its exclusive grant over an ended group row keeps `mode`.
    const x = await granted(backend, name, 'old', 30_000);
    await admin().query(
      "UPDATE unit_leases SET mode = 'shared', holder_limit = 3 WHERE name = $1",
      [name],
    );
    const refused = await backend.tryAcquire({
      name,
      owner: 'r',
      ttlMs: 10_000,
      keyHash: 'k-r',
      mode: 'shared',
      limit: 3,
    });
    expect(refused.granted).toBe(false);
    expect(await backend.inspect(name)).toMatchObject({ owner: 'old', token: x.token });
  });

  it('servers opening at once create the schema once, without racing', async () => {
    const prefix = `race_${process.pid}_`;
    await Promise.all(
      Array.from({ length: 5 }, () => open({ schema: 'dlm_race', tablePrefix: prefix })),
    );
    const tables = await admin().query(
      `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'dlm_race' AND tablename = $1`,
      [`${prefix}leases`],
    );
    expect((tables.rows[0] as { n: number }).n).toBe(1);
  });

  it('owners on two servers racing for one name: exactly one grant, and it is what inspect sees', async () => {
    const [a, b] = [await open(), await open()];
    const name = lockName('race');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        (index % 2 ? a : b).tryAcquire({ name, owner: `racer-${index}`, ttlMs: 10_000 }),
      ),
    );
    const granted = results.filter((result) => result.granted);
    expect(granted).toHaveLength(1);
    const refused = results.find((result) => !result.granted);
    expect(refused && !refused.granted && refused.ttlRemainingMs).toBeGreaterThan(9_000);
    const state = await a.inspect(name);
    expect(granted[0]?.granted && granted[0].grant.token).toBe(state?.token);
  });

  it('the same owner again: same token, lease refreshed; after its lease ended: a new, higher token', async () => {
    const backend = await open();
    const name = lockName('reentrant');
    const first = await backend.tryAcquire({ name, owner: 'a', ttlMs: 300 });
    const again = await backend.tryAcquire({ name, owner: 'a', ttlMs: 5_000 });
    if (!first.granted || !again.granted) throw new Error('expected grants');
    expect(again.grant.token).toBe(first.grant.token);
    expect((await backend.inspect(name))?.ttlRemainingMs).toBeGreaterThan(4_000);
    await backend.release({ name, token: again.grant.token });
    const short = await backend.tryAcquire({ name, owner: 'a', ttlMs: 100 });
    if (!short.granted) throw new Error('expected a grant');
    await sleep(200);
    const after = await backend.tryAcquire({ name, owner: 'a', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(short.grant.token);
  });

  it('another server hears grants, extensions, releases and revocations, and an expiry on the database clock', async () => {
    const [a, b] = [await open(), await open()];
    const name = lockName('events');
    const events: LockEvent[] = [];
    const stop = await watchFollowed(b, name, (event) => events.push(event));
    const first = await granted(a, name, 'a', 10_000);
    await until(() => events.length >= 1, 2_000);
    expect(events[0]).toMatchObject({ type: 'acquired', token: first.token, owner: 'a' });
    expect(await a.release({ name, token: first.token })).toBe(true);
    await until(() => events.length >= 2, 2_000);
    expect(events[1]).toMatchObject({ type: 'released', token: first.token });

    const second = await a.tryAcquire({ name, owner: 'a', ttlMs: 10_000 });
    if (!second.granted) throw new Error('expected a grant');
    expect(await a.revoke?.(name)).toBe(true);
    await until(() => events.length >= 4, 2_000);
    expect(events.slice(2).map((event) => event.type)).toEqual(['acquired', 'revoked']);

    // Expiry: B learns the 600 ms lease from A's NOTIFY; A extends once, so B's first check at
    // the old end finds the lease running and waits for the new end.
    const third = await a.tryAcquire({ name, owner: 'a', ttlMs: 600 });
    if (!third.granted) throw new Error('expected a grant');
    const grantedAt = performance.now();
    await sleep(300);
    await a.extend({ name, token: third.grant.token, ttlMs: 800 });
    await until(() => events.some((event) => event.type === 'expired'), 5_000);
    const expiredAfter = performance.now() - grantedAt;
    stop();
    const expired = events.find((event) => event.type === 'expired');
    expect(expired).toMatchObject({ type: 'expired', token: third.grant.token, owner: 'a' });
    expect(expiredAfter).toBeGreaterThanOrEqual(1_050);
    expect(expiredAfter).toBeLessThan(2_500);
  });

  it('what is left behind is bounded: release deletes the row, a new grant overwrites an ended one, the sweep deletes the rest', async () => {
    const backend = await open({ sweepMarginMs: 1, sweepLimit: 2 });
    const released = lockName('released');
    const grant = await backend.tryAcquire({ name: released, owner: 'a', ttlMs: 5_000 });
    if (!grant.granted) throw new Error('expected a grant');
    expect(await rows(released)).toBe(1);
    await backend.release({ name: released, token: grant.grant.token });
    expect(await rows(released)).toBe(0);

    const reused = lockName('reused');
    await backend.tryAcquire({ name: reused, owner: 'a', ttlMs: 50 });
    await sleep(100);
    await backend.tryAcquire({ name: reused, owner: 'b', ttlMs: 5_000 });
    expect(await rows(reused)).toBe(1);

    // A released-late lease (token matches, lease over) is deleted too, but is not a release.
    const late = lockName('late');
    const lateGrant = await backend.tryAcquire({ name: late, owner: 'a', ttlMs: 50 });
    if (!lateGrant.granted) throw new Error('expected a grant');
    await sleep(100);
    expect(await backend.release({ name: late, token: lateGrant.grant.token })).toBe(false);
    expect(await rows(late)).toBe(0);

    const abandoned = [lockName('abandoned'), lockName('abandoned'), lockName('abandoned')];
    for (const name of abandoned) await backend.tryAcquire({ name, owner: 'a', ttlMs: 20 });
    const held = lockName('held');
    await backend.tryAcquire({ name: held, owner: 'a', ttlMs: 10_000 });
    await sleep(100);
    // Bounded per run (sweepLimit 2), and every ended row goes in the end; a held one stays.
    expect(await backend.sweep()).toBeLessThanOrEqual(2);
    while ((await backend.sweep()) > 0) {}
    for (const name of abandoned) expect(await rows(name)).toBe(0);
    expect(await rows(held)).toBe(1);
  });

  it('a LISTEN connection that is cut is made again, and watchers hear of what changed meanwhile', async () => {
    const [a, b] = [await open(), await open({ heartbeatMs: 60_000 })];
    const name = lockName('relisten');
    const events: LockEvent[] = [];
    const stop = await watchFollowed(b, name, (event) => events.push(event));
    const grant = await granted(a, name, 'a', 30_000);
    await until(() => events.length >= 1, 2_000);
    // Cut every LISTEN connection on the server (B's among them), then release at once.
    await admin().query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`,
    );
    await a.release({ name, token: grant.token });
    await until(() => events.some((event) => event.type !== 'acquired'), 5_000);
    stop();
    expect(events.some((event) => event.type !== 'acquired')).toBe(true);
    // And B listens again: a later grant reaches it.
    const events2: LockEvent[] = [];
    const stop2 = await watchFollowed(b, name, (event) => events2.push(event));
    await sleep(200);
    const next = await a.tryAcquire({ name, owner: 'a', ttlMs: 30_000 });
    await until(() => events2.some((event) => event.type === 'acquired'), 3_000);
    stop2();
    expect(events2.find((event) => event.type === 'acquired')?.token).toBe(
      next.granted ? next.grant.token : -1n,
    );
  });

  it('connections terminated by the server under load: calls fail with UNAVAILABLE, never crash the process, and locking goes on', async () => {
    const backend = await open({ commandTimeoutMs: 1_000, tablePrefix: 'terminated_' });
    const errors = new Set<string>();
    let stop = false;
    let grants = 0;
    const loops = Array.from({ length: 4 }, async (_, index) => {
      while (!stop) {
        const name = `terminated-${index % 2}`;
        try {
          const result = await backend.tryAcquire({ name, owner: `o${index}`, ttlMs: 2_000 });
          if (result.granted) {
            grants += 1;
            await backend.release({ name, token: result.grant.token });
          }
        } catch (error) {
          if (!isDlmError(error, 'UNAVAILABLE')) throw error;
          errors.add(error.code);
        }
      }
    });
    for (let round = 0; round < 30; round += 1) {
      await sleep(20);
      await admin().query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dlm' AND pid <> pg_backend_pid()`,
      );
    }
    const before = grants;
    await sleep(300);
    stop = true;
    await Promise.all(loops);
    expect([...errors]).toEqual(errors.size ? ['UNAVAILABLE'] : []);
    expect(grants).toBeGreaterThan(before);
  });

  describe.skipIf(!postgresManaged())('faults', () => {
    const commandTimeoutMs = 1_000;

    it('a paused database: UNAVAILABLE within the bound (writes indeterminate); locking resumes after', async () => {
      const backend = await open({ commandTimeoutMs });
      const name = lockName('paused');
      await postgres().pause();
      try {
        const started = performance.now();
        const acquire = await failure(backend.tryAcquire({ name, owner: 'a', ttlMs: 5_000 }));
        const acquireMs = performance.now() - started;
        const inspect = await failure(backend.inspect(name));
        expect(isDlmError(acquire, 'UNAVAILABLE')).toBe(true);
        expect((acquire as { details: { indeterminate?: boolean } }).details.indeterminate).toBe(
          true,
        );
        expect(isDlmError(inspect, 'UNAVAILABLE')).toBe(true);
        expect(
          (inspect as { details: { indeterminate?: boolean } }).details.indeterminate,
        ).toBeUndefined();
        expect(acquireMs).toBeLessThan(commandTimeoutMs + 500);
        console.log(`[postgres] paused: UNAVAILABLE after ${Math.round(acquireMs)} ms`);
      } finally {
        await postgres().resume();
      }
      // The abandoned acquire may have committed after the resume (it was indeterminate): the
      // name is then held by 'a' with a bounded lease; a new name works at once.
      const after = await backend.tryAcquire({
        name: lockName('after-pause'),
        owner: 'b',
        ttlMs: 5_000,
      });
      expect(after.granted).toBe(true);
    });

    it('kill -9 and restart: UNAVAILABLE while down, then held locks, tokens and LISTEN are back', async () => {
      const [a, b] = [await open({ commandTimeoutMs }), await open({ commandTimeoutMs })];
      const name = lockName('killed');
      const grant = await a.tryAcquire({ name, owner: 'a', ttlMs: 60_000 });
      if (!grant.granted) throw new Error('expected a grant');
      await admin().end();
      await postgres().kill();
      const started = performance.now();
      const down = await failure(
        a.tryAcquire({ name: lockName('down'), owner: 'a', ttlMs: 5_000 }),
      );
      expect(isDlmError(down, 'UNAVAILABLE')).toBe(true);
      // The backend is named: a client library's words alone read like an outage of dlm.
      expect(down.message).toMatch(/^acquire: PostgreSQL/);
      expect(performance.now() - started).toBeLessThan(commandTimeoutMs + 500);
      await postgres().start();
      await reconnectAdmin();

      const events: LockEvent[] = [];
      const stop = await watchFollowed(b, name, (event) => events.push(event));
      const restartedAt = performance.now();
      let refused: Awaited<ReturnType<PostgresBackend['tryAcquire']>> | undefined;
      while (!refused && performance.now() - restartedAt < 10_000) {
        refused = await b.tryAcquire({ name, owner: 'b', ttlMs: 5_000 }).catch(() => undefined);
      }
      console.log(
        `[postgres] kill -9: locking resumed ${Math.round(performance.now() - restartedAt)} ms after the restart`,
      );
      expect(refused?.granted).toBe(false);
      // B listens again: it hears A's release of the lock held across the restart.
      await sleep(500);
      expect(await a.release({ name, token: grant.grant.token })).toBe(true);
      await until(() => events.some((event) => event.type === 'released'), 5_000);
      stop();
      expect(events.find((event) => event.type === 'released')?.token).toBe(grant.grant.token);
      const next = await b.tryAcquire({ name, owner: 'b', ttlMs: 5_000 });
      expect(next.granted && next.grant.token).toBeGreaterThan(grant.grant.token);
    });

    it('PostgreSQL down when the backend starts: calls fail at once naming it, as after an outage, and locking starts once it is up', async () => {
      await admin().end();
      await postgres().kill();
      const backend = postgresBackend({
        url: postgres().url,
        tablePrefix: 'unit_',
        commandTimeoutMs,
      });
      try {
        // Not the whole commandTimeoutMs each waiting for a LISTEN that was refused.
        await expectRefusedAtOnce(
          backend,
          /^not connected to PostgreSQL \(connect ECONNREFUSED .*; reconnecting\)$/,
        );
        await postgres().start();
        await reconnectAdmin();
        await until(
          async () =>
            (
              await backend
                .tryAcquire({ name: lockName('warm'), owner: 'w', ttlMs: 5_000 })
                .catch(() => ({ granted: false }))
            ).granted,
          10_000,
        );
      } finally {
        await backend.close();
      }
    });
  });
});
