import { lockName, until } from '@dlm/conformance';
import type { AcquireResult, LockBackend, LockEvent } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { usePostgres } from './support.js';

const run = postgresAvailable();

function token(result: AcquireResult): bigint {
  if (!result.granted) throw new Error(`expected a grant, got ${JSON.stringify(result)}`);
  return result.grant.token;
}

describe.skipIf(!run)('postgres shared modes', () => {
  const { admin, open } = usePostgres('shared_');
  const shared = (
    backend: LockBackend,
    name: string,
    owner: string,
    limit: number,
    ttlMs = 10_000,
    keyHash: string | undefined = `k-${owner}`,
  ) => backend.tryAcquire({ name, owner, ttlMs, keyHash, mode: 'shared', limit });
  const exclusive = (backend: LockBackend, name: string, owner: string, ttlMs = 10_000) =>
    backend.tryAcquire({ name, owner, ttlMs, keyHash: `k-${owner}` });

  it('says sharedModes', async () => {
    const backend = await open();
    expect(backend.capabilities.sharedModes).toBe(true);
  });

  it('grants shared holders up to the limit, refuses beyond it and refuses an exclusive', async () => {
    const backend = await open();
    const name = lockName('limit');
    const a = token(await shared(backend, name, 'a', 2, 5_000));
    const b = token(await shared(backend, name, 'b', 2, 20_000));
    expect(b).toBeGreaterThan(a);
    const c = await shared(backend, name, 'c', 2);
    expect(c.granted).toBe(false);
    // At the limit: the soonest holder's end.
    if (!c.granted) expect(c.ttlRemainingMs).toBeLessThanOrEqual(5_000);
    const x = await exclusive(backend, name, 'x');
    expect(x.granted).toBe(false);
    // Exclusive: the latest holder's end.
    if (!x.granted) expect(x.ttlRemainingMs).toBeGreaterThan(5_000);
    const other = await shared(backend, name, 'd', 3);
    expect(other).toEqual({ granted: false, conflict: { field: 'limit', limit: 2 } });
  });

  it('refreshes the same holder, answers a mode conflict either way, and needs the key', async () => {
    const backend = await open();
    const name = lockName('refresh');
    const first = token(await shared(backend, name, 'a', 3, 2_000));
    const again = token(await shared(backend, name, 'a', 3, 30_000));
    expect(again).toBe(first);
    const state = await backend.inspect(name);
    expect(state?.holders).toHaveLength(1);
    expect(state?.ttlRemainingMs).toBeGreaterThan(2_000);
    expect(await exclusive(backend, name, 'a')).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    // The same owner with another key is another requester: a second holder.
    const otherKey = token(await shared(backend, name, 'a', 3, 10_000, 'k-other'));
    expect(otherKey).toBeGreaterThan(first);
    const held = lockName('held');
    token(await exclusive(backend, held, 'a'));
    expect(await shared(backend, held, 'a', 2)).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
    expect((await shared(backend, held, 'b', 2)).granted).toBe(false);
  });

  it('releases and extends one holder only; inspect and list order holders by token', async () => {
    const backend = await open();
    const name = lockName('per-holder');
    const a = token(await shared(backend, name, 'a', 3));
    const b = token(await shared(backend, name, 'b', 3));
    const c = token(await shared(backend, name, 'c', 3));
    const state = await backend.inspect(name);
    expect(state).toMatchObject({ mode: 'shared', limit: 3, owner: 'c', token: c });
    expect(state?.holders?.map((h) => h.token)).toEqual([a, b, c]);
    expect(await backend.release({ name, token: c, keyHash: 'k-wrong' })).toBe(false);
    expect(await backend.release({ name, token: c, keyHash: 'k-c' })).toBe(true);
    expect(await backend.release({ name, token: c, keyHash: 'k-c' })).toBe(false);
    const after = await backend.inspect(name);
    expect(after).toMatchObject({ owner: 'b', token: b });
    expect(after?.holders?.map((h) => h.owner)).toEqual(['a', 'b']);
    const extended = await backend.extend({ name, token: a, keyHash: 'k-a', ttlMs: 60_000 });
    expect(extended).toEqual({ name, owner: 'a', token: a, ttlMs: 60_000 });
    const times = await backend.inspect(name);
    expect(times?.holders?.[0]?.ttlRemainingMs).toBeGreaterThan(30_000);
    expect(times?.holders?.[1]?.ttlRemainingMs).toBeLessThanOrEqual(10_000);
    const listed = await backend.list!(name);
    expect(listed).toHaveLength(1);
    expect(listed[0]?.holders?.map((h) => h.token)).toEqual([a, b]);
    expect(await backend.release({ name, token: a, keyHash: 'k-a' })).toBe(true);
    expect(await backend.release({ name, token: b, keyHash: 'k-b' })).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    // Free again: an exclusive grant gets a token above every reader's.
    expect(token(await exclusive(backend, name, 'x'))).toBeGreaterThan(c);
  });

  it('ends a holder at its expiry only, with one event per holder; revoke ends all', async () => {
    const backend = await open();
    const name = lockName('expiry');
    const events: LockEvent[] = [];
    const stop = backend.watch(name, (event) => events.push(event));
    const a = token(await shared(backend, name, 'a', 5, 300));
    const b = token(await shared(backend, name, 'b', 5, 30_000));
    await until(async () => events.some((e) => e.type === 'expired' && e.token === a), {
      what: 'the expiry of a',
    });
    expect((await backend.inspect(name))?.holders?.map((h) => h.token)).toEqual([b]);
    const c = token(await shared(backend, name, 'c', 5));
    expect(await backend.revoke!(name)).toBe(true);
    await until(async () => events.filter((e) => e.type === 'revoked').length >= 2, {
      what: 'two revoked events',
    });
    const acquired = events.filter((e) => e.type === 'acquired');
    expect(acquired.every((e) => e.mode === 'shared')).toBe(true);
    expect(acquired.map((e) => e.token)).toEqual(expect.arrayContaining([a, b, c]));
    expect(
      events
        .filter((e) => e.type === 'revoked')
        .map((e) => e.token)
        .sort(),
    ).toEqual([b, c].sort());
    expect(events.filter((e) => e.type === 'expired' && e.token === a)).toHaveLength(1);
    expect(await backend.inspect(name)).toBeNull();
    stop();
  });

  it('grants exactly the limit to concurrent tryAcquires on two backends', async () => {
    const one = await open();
    const two = await open();
    const name = lockName('race');
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => shared(i % 2 ? one : two, name, `o${i}`, 3)),
    );
    expect(results.filter((r) => r.granted)).toHaveLength(3);
    expect((await one.inspect(name))?.holders).toHaveLength(3);
  });

  it('queues both modes in one FIFO across two backends (S, S, X, S)', async () => {
    const one = await open();
    const two = await open();
    const name = lockName('fifo');
    const holder = token(await exclusive(one, name, 'h', 30_000));
    const signal = new AbortController().signal;
    const order: string[] = [];
    const queued = (backend: LockBackend, owner: string, mode?: 'shared') =>
      backend.acquireQueued!({
        name,
        owner,
        ttlMs: 30_000,
        keyHash: `k-${owner}`,
        signal,
        ...(mode ? { mode, limit: 10 } : {}),
      }).then((result) => {
        order.push(owner);
        return result;
      });
    const s1 = queued(one, 's1', 'shared');
    await until(async () => (await waiters(name)) >= 1, { what: 's1 queued' });
    const s2 = queued(two, 's2', 'shared');
    await until(async () => (await waiters(name)) >= 2, { what: 's2 queued' });
    const x = queued(one, 'x');
    await until(async () => (await waiters(name)) >= 3, { what: 'x queued' });
    const s3 = queued(two, 's3', 'shared');
    await until(async () => (await waiters(name)) >= 4, { what: 's3 queued' });
    const started = Date.now();
    expect(await one.release({ name, token: holder, keyHash: 'k-h' })).toBe(true);
    const [r1, r2] = await Promise.all([s1, s2]);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(order.slice(0, 2).sort()).toEqual(['s1', 's2']);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(order).toHaveLength(2);
    await one.release({ name, token: token(r1), keyHash: 'k-s1' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(order).toHaveLength(2);
    await two.release({ name, token: token(r2), keyHash: 'k-s2' });
    const rx = await x;
    expect(order[2]).toBe('x');
    expect(token(rx)).toBeGreaterThan(token(r2));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(order).toHaveLength(3);
    await one.release({ name, token: token(rx), keyHash: 'k-x' });
    expect(token(await s3)).toBeGreaterThan(token(rx));
  });

  it('admits the next waiter of a full semaphore at a release and at an expiry', async () => {
    const one = await open();
    const two = await open();
    const name = lockName('semaphore');
    const a = token(await shared(one, name, 'a', 1, 30_000));
    const signal = new AbortController().signal;
    const wait = (owner: string) =>
      two.acquireQueued!({
        name,
        owner,
        ttlMs: 1_000,
        keyHash: `k-${owner}`,
        signal,
        mode: 'shared',
        limit: 1,
      });
    const b = wait('b');
    await until(async () => (await waiters(name)) >= 1, { what: 'b queued' });
    let started = Date.now();
    await one.release({ name, token: a, keyHash: 'k-a' });
    const gotB = token(await b);
    expect(Date.now() - started).toBeLessThan(1_500);
    // b's lease (1 s) runs out: c gets in at its end, not at a poll.
    const c = wait('c');
    started = Date.now();
    const gotC = token(await c);
    expect(gotC).toBeGreaterThan(gotB);
    expect(Date.now() - started).toBeLessThan(2_500);
  });

  it("grants a queued writer at the last reader's expiry, and a shorter refresh moves that end", async () => {
    const one = await open();
    const two = await open();
    const name = lockName('writer-at-expiry');
    const a = token(await shared(one, name, 'a', 4, 30_000));
    // a refreshes to a short lease: the group's end is now its new end, not the old one.
    expect(token(await shared(one, name, 'a', 4, 600))).toBe(a);
    const b = token(await shared(one, name, 'b', 4, 900));
    const started = Date.now();
    const writer = await two.acquireQueued!({
      name,
      owner: 'w',
      ttlMs: 5_000,
      keyHash: 'k-w',
      signal: new AbortController().signal,
    });
    const waited = Date.now() - started;
    expect(token(writer)).toBeGreaterThan(b);
    // Not before the last reader's end, and well before the first lease of a (30 s) would end.
    expect(waited).toBeGreaterThanOrEqual(700);
    expect(waited).toBeLessThan(5_000);
    expect(await one.inspect(name)).toMatchObject({ owner: 'w', token: token(writer) });
  });

  it('never grants a reader beside a live row marked shared that has no live holder', async () => {
    const backend = await open();
    const name = lockName('foreign-row');
    // What an older adapter leaves: its exclusive grant over an ended group row keeps `mode`.
    const x = token(await exclusive(backend, name, 'old', 30_000));
    await sql("UPDATE shared_leases SET mode = 'shared', holder_limit = 3 WHERE name = $1", [name]);
    const refused = await shared(backend, name, 'r', 3);
    expect(refused.granted).toBe(false);
    expect(await backend.inspect(name)).toMatchObject({ owner: 'old', token: x });
  });

  it('answers conflicts from acquireQueued and leaves the queue', async () => {
    const backend = await open();
    const name = lockName('queued-conflict');
    token(await shared(backend, name, 'a', 2));
    const signal = new AbortController().signal;
    const limit = await backend.acquireQueued!({
      name,
      owner: 'b',
      ttlMs: 1_000,
      signal,
      mode: 'shared',
      limit: 5,
    });
    expect(limit).toEqual({ granted: false, conflict: { field: 'limit', limit: 2 } });
    const mode = await backend.acquireQueued!({
      name,
      owner: 'a',
      keyHash: 'k-a',
      ttlMs: 1_000,
      signal,
    });
    expect(mode).toEqual({ granted: false, conflict: { field: 'mode' } });
    expect(await waiters(name)).toBe(0);
  });

  async function sql(text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> {
    return (await admin().query(text, values)).rows;
  }
  async function waiters(name: string): Promise<number> {
    const rows = await sql('SELECT count(*)::int AS n FROM shared_waiters WHERE name = $1', [name]);
    return rows[0]?.n as number;
  }
});
