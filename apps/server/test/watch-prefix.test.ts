import { embeddedBackend } from '@dlm/adapter-embedded';
import { sleep, until } from '@dlm/conformance';
import { formatToken, type LockBackend } from '@dlm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

// The server is given a backend the test also holds, so that the test can act on the backend
// directly: that is what another dlm server on a shared backend looks like to this one.
let backend: LockBackend;
let server: RunningServer;
beforeAll(async () => {
  backend = await embeddedBackend();
  server = await startServer({ port: 0, backend });
});
afterAll(async () => {
  await server.close();
  await backend.close();
});

const session = (): Promise<Peer> => openSession(server.url);

/** The next lock.changed for `watchId` (others are left in place). */
async function nextChange(peer: Peer, watchId: string, timeoutMs = 5_000) {
  const index = () =>
    peer.notifications.findIndex(
      (n) => n.method === 'lock.changed' && n.params.watchId === watchId,
    );
  await until(() => index() >= 0, { timeoutMs, intervalMs: 10, what: 'a lock.changed' });
  return peer.notifications.splice(index(), 1)[0]!.params;
}

describe('lock.watchPrefix', () => {
  it('starts with the held locks under the prefix, then reports grants, extends, releases and waiters', async () => {
    const holder = await session();
    const watcher = await session();
    const first = (await holder.call('lock.acquire', { name: 'wp/a', ttlMs: 20_000, owner: 'h' }))
      .result;
    await holder.call('lock.acquire', { name: 'elsewhere', ttlMs: 20_000 });

    const watch = (await watcher.call('lock.watchPrefix', { prefix: 'wp/' })).result;
    expect(watch.locks).toHaveLength(1);
    expect(watch.locks[0]).toMatchObject({
      name: 'wp/a',
      owner: 'h',
      token: first.token,
      waiters: 0,
    });
    expect(watch.locks[0].ttlRemainingMs).toBeGreaterThan(15_000);

    const second = (await holder.call('lock.acquire', { name: 'wp/b', ttlMs: 9_000, owner: 'h2' }))
      .result;
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      name: 'wp/b',
      held: true,
      event: 'acquired',
      owner: 'h2',
      token: second.token,
      waiters: 0,
    });

    await holder.call('lock.extend', { name: 'wp/b', token: second.token, ttlMs: 30_000 });
    const extended = await nextChange(watcher, watch.watchId);
    expect(extended).toMatchObject({ name: 'wp/b', event: 'extended', held: true });
    expect(extended.ttlRemainingMs).toBeGreaterThan(25_000);

    const waiting = watcher.call('lock.acquire', { name: 'wp/a', ttlMs: 5_000, waitMs: 10_000 });
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      name: 'wp/a',
      event: 'waiters',
      held: true,
      waiters: 1,
    });

    await holder.call('lock.release', { name: 'wp/a', token: first.token });
    const granted = (await waiting).result;
    const changes = [
      await nextChange(watcher, watch.watchId),
      await nextChange(watcher, watch.watchId),
      await nextChange(watcher, watch.watchId),
    ];
    expect(changes.map((change) => change.event).sort()).toEqual([
      'acquired',
      'released',
      'waiters',
    ]);
    expect(changes.find((change) => change.event === 'released')).toMatchObject({
      held: false,
      token: first.token,
    });
    expect(changes.find((change) => change.event === 'acquired')).toMatchObject({
      token: granted.token,
    });

    // Nothing about locks outside the prefix.
    await holder.call('lock.acquire', { name: 'elsewhere/2', ttlMs: 5_000 });
    await sleep(50);
    expect(watcher.notifications.filter((n) => n.params.watchId === watch.watchId)).toEqual([]);

    expect((await watcher.call('lock.unwatch', { watchId: watch.watchId })).result).toEqual({});
    await holder.call('lock.acquire', { name: 'wp/c', ttlMs: 5_000 });
    await sleep(50);
    expect(watcher.notifications.filter((n) => n.method === 'lock.changed')).toEqual([]);
    holder.close();
    watcher.close();
  });

  it('reports expiries and revocations', async () => {
    const holder = await session();
    const watcher = await session();
    const watch = (await watcher.call('lock.watchPrefix', { prefix: 'ends/' })).result;
    const short = (await holder.call('lock.acquire', { name: 'ends/short', ttlMs: 150 })).result;
    expect((await nextChange(watcher, watch.watchId)).event).toBe('acquired');
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      event: 'expired',
      name: 'ends/short',
      held: false,
      token: short.token,
    });

    const doomed = (await holder.call('lock.acquire', { name: 'ends/doomed', ttlMs: 30_000 }))
      .result;
    expect((await nextChange(watcher, watch.watchId)).event).toBe('acquired');
    await fetch(`${server.httpUrl}/v1/locks/${encodeURIComponent('ends/doomed')}`, {
      method: 'DELETE',
    });
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      event: 'revoked',
      name: 'ends/doomed',
      token: doomed.token,
    });
    // One event per end, however many sources reported it.
    await sleep(50);
    expect(watcher.notifications.filter((n) => n.params?.watchId === watch.watchId)).toEqual([]);
    holder.close();
    watcher.close();
  });

  it('includes locks granted elsewhere on the backend, and sees them released and expire', async () => {
    const foreign = await backend.tryAcquire({
      name: 'far/a',
      owner: 'other-server',
      ttlMs: 20_000,
    });
    const brief = await backend.tryAcquire({ name: 'far/b', owner: 'other-server', ttlMs: 300 });
    if (!foreign.granted || !brief.granted) throw new Error('setup: not granted');

    const watcher = await session();
    const watch = (await watcher.call('lock.watchPrefix', { prefix: 'far/' })).result;
    expect(watch.locks.map((lock: { name: string }) => lock.name)).toEqual(['far/a', 'far/b']);
    expect(watch.locks[0]).toMatchObject({
      owner: 'other-server',
      token: formatToken(foreign.grant.token),
    });

    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      name: 'far/b',
      event: 'expired',
      held: false,
    });
    await backend.release({ name: 'far/a', token: foreign.grant.token });
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({
      name: 'far/a',
      event: 'released',
      token: formatToken(foreign.grant.token),
    });
    watcher.close();
  });

  it('an empty prefix watches everything; a bad one is INVALID_PARAMS naming prefix', async () => {
    const peer = await session();
    const all = await peer.call('lock.watchPrefix', { prefix: '' });
    expect(Array.isArray(all.result.locks)).toBe(true);
    const bad = await peer.call('lock.watchPrefix', { prefix: 'x\u0000' });
    expect(bad.error).toMatchObject({
      code: -32602,
      data: { code: 'INVALID_PARAMS', field: 'prefix' },
    });
    const long = await peer.call('lock.watchPrefix', { prefix: 'x'.repeat(257) });
    expect(long.error.data.field).toBe('prefix');
    peer.close();
  });
});

describe('an acquire that may wait but finds the lock free', () => {
  // The CLI waits 10 s by default: each uncontended `dlm lock` once showed as contention.
  it('is no waiter: no waiters event, no queued event, nothing under contention', async () => {
    const holder = await session();
    const watcher = await session();
    const watch = (await watcher.call('lock.watchPrefix', { prefix: 'free/' })).result;
    const lease = (
      await holder.call('lock.acquire', { name: 'free/job', ttlMs: 5_000, waitMs: 10_000 })
    ).result;
    expect(await nextChange(watcher, watch.watchId)).toMatchObject({ event: 'acquired' });
    await sleep(50);
    expect(watcher.notifications.filter((n) => n.params?.watchId === watch.watchId)).toEqual([]);
    const response = await fetch(`${server.httpUrl}/v1/feed?prefix=free/`);
    const feed = (await response.json()) as {
      events: { type: string }[];
      rates: { waits: number[] };
    };
    expect(feed.events.map((event) => event.type)).toEqual(['acquired']);
    expect(feed.rates.waits.reduce((a, b) => a + b, 0)).toBe(0);
    await holder.call('lock.release', { name: 'free/job', token: lease.token });
    holder.close();
    watcher.close();
  });
});
