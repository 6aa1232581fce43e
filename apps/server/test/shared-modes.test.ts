import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { startServer } from '../src/index.js';
import { embeddedServerFixture } from './support.js';
import { connect } from './ws-peer.js';

const fixture = embeddedServerFixture();
const { peers, servers, backends, session } = fixture;

let seq = 0;
function unique(label: string): string {
  seq += 1;
  return `shared-${label}-${seq}-${Date.now()}`;
}

describe('shared modes over the wire', () => {
  it('hello reports maxHolders', async () => {
    const peer = await connect(fixture.server.url);
    peers.push(peer);
    expect((await peer.hello()).limits.maxHolders).toBe(10_000);
  });

  it('lock.get: the highest-token holder on top, mode, limit, every holder by token', async () => {
    const a = await session();
    const b = await session();
    const name = unique('get');
    const first = (
      await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'r-1', mode: 'shared', limit: 3 })
    ).result;
    const second = (
      await b.call('lock.acquire', { name, ttlMs: 20_000, owner: 'r-2', mode: 'shared', limit: 3 })
    ).result;
    expect(first).toMatchObject({ mode: 'shared', limit: 3 });
    expect(BigInt(second.token)).toBeGreaterThan(BigInt(first.token));
    const got = (await a.call('lock.get', { name })).result;
    expect(got).toEqual({
      name,
      held: true,
      owner: 'r-2',
      token: second.token,
      ttlRemainingMs: expect.any(Number),
      mode: 'shared',
      limit: 3,
      holders: [
        { owner: 'r-1', token: first.token, ttlRemainingMs: expect.any(Number) },
        { owner: 'r-2', token: second.token, ttlRemainingMs: expect.any(Number) },
      ],
      waiters: 0,
      waitersScope: 'server',
    });
    expect(got.ttlRemainingMs).toBeGreaterThan(10_000);
    expect(got.holders[0].ttlRemainingMs).toBeLessThanOrEqual(10_000);
  });

  it('another limit is INVALID_PARAMS with data.field limit and data.limit the holders', async () => {
    const a = await session();
    const name = unique('limit');
    await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'p-1', mode: 'shared', limit: 2 });
    const refused = await a.call('lock.acquire', {
      name,
      ttlMs: 10_000,
      owner: 'p-2',
      mode: 'shared',
      limit: 5,
    });
    expect(refused.error).toMatchObject({
      code: -32602,
      data: { code: 'INVALID_PARAMS', retryable: false, field: 'limit', limit: 2 },
    });
  });

  it('lock.changed per holder: mode and holders after each grant and end', async () => {
    const watcher = await session();
    const holder = await session();
    const name = unique('changed');
    const { watchId } = (await watcher.call('lock.watch', { name })).result;
    const t1 = (
      await holder.call('lock.acquire', { name, ttlMs: 10_000, owner: 'r-1', mode: 'shared' })
    ).result.token;
    const t2 = (
      await holder.call('lock.acquire', { name, ttlMs: 10_000, owner: 'r-2', mode: 'shared' })
    ).result.token;
    const grants = [
      await watcher.nextNotification('lock.changed'),
      await watcher.nextNotification('lock.changed'),
    ];
    expect(grants.map((g) => g.params)).toEqual([
      { watchId, name, held: true, owner: 'r-1', token: t1, mode: 'shared', holders: 1 },
      { watchId, name, held: true, owner: 'r-2', token: t2, mode: 'shared', holders: 2 },
    ]);
    // One session holds both: it releases each by token, without keys.
    const releasedSeen = async (token: string, held: boolean, holders: number) => {
      expect((await holder.call('lock.release', { name, token })).result).toEqual({
        released: true,
      });
      expect((await watcher.nextNotification('lock.changed')).params).toEqual({
        watchId,
        name,
        held,
        holders,
      });
    };
    await releasedSeen(t1, true, 1);
    await releasedSeen(t2, false, 0);
  });

  it('metrics count grants and held leases by mode', async () => {
    const own = await startServer({ port: 0 });
    servers.push(own);
    const peer = await session(own);
    const name = unique('metrics');
    for (const owner of ['m-1', 'm-2']) {
      await peer.call('lock.acquire', { name, ttlMs: 10_000, owner, mode: 'shared', limit: 2 });
    }
    await peer.call('lock.acquire', { name: `${name}/x`, ttlMs: 10_000 });
    const text = await (await fetch(`${own.httpUrl}/metrics`)).text();
    expect(text).toMatch(/^dlm_lock_grants_total\{mode="shared"\} 2$/m);
    expect(text).toMatch(/^dlm_lock_grants_total\{mode="exclusive"\} 1$/m);
    expect(text).toMatch(/^dlm_lock_holders\{mode="shared"\} 2$/m);
    expect(text).toMatch(/^dlm_lock_holders\{mode="exclusive"\} 1$/m);
    expect(text).toMatch(/^dlm_locks_held 3$/m);
  });

  it('maxLocksPerSession counts each shared lease of a name; a re-acquire counts none', async () => {
    const own = await startServer({ port: 0, limits: { maxLocksPerSession: 2 } });
    servers.push(own);
    const peer = await session(own);
    const name = unique('per-session');
    const acquire = (owner: string) =>
      peer.call('lock.acquire', { name, ttlMs: 10_000, owner, mode: 'shared', limit: 5 });
    const first = (await acquire('s-1')).result;
    const second = (await acquire('s-2')).result;
    expect(second.token).not.toBe(first.token);
    expect((await acquire('s-3')).error.data.code).toBe('LIMIT_EXCEEDED');
    // Without a key, the session's own lease of that owner: the same grant, refreshed.
    expect((await acquire('s-1')).result.token).toBe(first.token);
    await peer.call('lock.release', { name, token: first.token });
    expect((await acquire('s-3')).result.token).toBeDefined();
  });

  it('a backend without sharedModes refuses shared with INVALID_PARAMS field mode', async () => {
    const inner = await embeddedBackend();
    backends.push(inner);
    const exclusiveOnly: LockBackend = Object.create(inner, {
      capabilities: { value: { ...inner.capabilities, sharedModes: false } },
    });
    const plain = await startServer({ port: 0, backend: exclusiveOnly });
    servers.push(plain);
    const peer = await session(plain);
    const refused = await peer.call('lock.acquire', {
      name: 'x',
      ttlMs: 10_000,
      mode: 'shared',
      limit: 2,
    });
    expect(refused.error.data).toMatchObject({ code: 'INVALID_PARAMS', field: 'mode' });
    const granted = await peer.call('lock.acquire', { name: 'x', ttlMs: 10_000 });
    expect(granted.result.mode).toBe('exclusive');
  });

  it('the admin API lists every holder; watchPrefix shows them without a false expiry', async () => {
    const a = await session();
    const watcher = await session();
    const base = unique('feed');
    const name = `${base}/s`;
    const { watchId } = (await watcher.call('lock.watchPrefix', { prefix: `${base}/` })).result;
    const t1 = (
      await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'r-1', mode: 'shared', limit: 4 })
    ).result.token;
    const t2 = (
      await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'r-2', mode: 'shared', limit: 4 })
    ).result.token;
    const events = [
      await watcher.nextNotification('lock.changed'),
      await watcher.nextNotification('lock.changed'),
    ];
    expect(events.map((e) => [e.params.event, e.params.token, e.params.holders])).toEqual([
      ['acquired', t1, 1],
      ['acquired', t2, 2],
    ]);
    expect(events[1]!.params).toMatchObject({ watchId, mode: 'shared', held: true });
    const snapshot = (await watcher.call('lock.watchPrefix', { prefix: `${base}/` })).result.locks;
    expect(snapshot).toEqual([
      expect.objectContaining({
        name,
        owner: 'r-2',
        token: t2,
        mode: 'shared',
        limit: 4,
        holders: [
          { owner: 'r-1', token: t1, ttlRemainingMs: expect.any(Number) },
          { owner: 'r-2', token: t2, ttlRemainingMs: expect.any(Number) },
        ],
      }),
    ]);
    const listed = (await (
      await fetch(`${fixture.server.httpUrl}/v1/locks?prefix=${encodeURIComponent(base)}`)
    ).json()) as {
      locks: Record<string, unknown>[];
    };
    expect(listed.locks).toEqual([
      expect.objectContaining({
        name,
        mode: 'shared',
        limit: 4,
        holders: [
          { owner: 'r-1', token: t1, ttlRemainingMs: expect.any(Number) },
          { owner: 'r-2', token: t2, ttlRemainingMs: expect.any(Number) },
        ],
      }),
    ]);
    await a.call('lock.release', { name, token: t1 });
    const end = await watcher.nextNotification('lock.changed');
    expect(end.params).toMatchObject({ event: 'released', token: t1, held: true, holders: 1 });
    expect(watcher.notifications.filter((n) => n.params?.event === 'expired')).toEqual([]);
  });
});
