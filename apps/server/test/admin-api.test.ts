import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, type RunningServer, startServer } from '../src/index.js';
import { connect, openSession, type Peer } from './ws-peer.js';

const logLines: Array<Record<string, unknown>> = [];
let server: RunningServer;
let base: string;

beforeAll(async () => {
  server = await startServer({
    port: 0,
    logger: createLogger('info', (line) => logLines.push(JSON.parse(line))),
  });
  base = `${server.httpUrl}/v1/locks`;
});
afterAll(async () => {
  await server.close();
});

const session = (): Promise<Peer> => openSession(server.url);

async function json(response: Response): Promise<Record<string, any>> {
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  return (await response.json()) as Record<string, any>;
}

describe('GET /v1/locks', () => {
  it('lists held locks under a prefix with owner, token, remaining TTL and waiters', async () => {
    const holder = await session();
    const waiter = await session();
    const a = (await holder.call('lock.acquire', { name: 'list/a', ttlMs: 30_000, owner: 'alice' }))
      .result;
    await holder.call('lock.acquire', { name: 'list/b c', ttlMs: 5_000, owner: 'bob' });
    await holder.call('lock.acquire', { name: 'other', ttlMs: 5_000, owner: 'carol' });
    const waiting = waiter.call('lock.acquire', { name: 'list/a', ttlMs: 1_000, waitMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 50));

    const body = await json(await fetch(`${base}?prefix=list%2F`));
    expect(body.locks.map((lock: { name: string }) => lock.name)).toEqual(['list/a', 'list/b c']);
    const [first, second] = body.locks;
    expect(first).toMatchObject({
      name: 'list/a',
      owner: 'alice',
      token: a.token,
      waiters: 1,
      waitersScope: 'server',
    });
    expect(first.ttlRemainingMs).toBeGreaterThan(25_000);
    expect(first.ttlRemainingMs).toBeLessThanOrEqual(30_000);
    expect(second).toMatchObject({ owner: 'bob', waiters: 0 });

    const all = await json(await fetch(base));
    expect(all.locks.map((lock: { name: string }) => lock.name)).toContain('other');

    await holder.call('lock.release', { name: 'list/a', token: a.token });
    expect((await waiting).result.name).toBe('list/a');
    holder.close();
    waiter.close();
  });

  it('a bad prefix is INVALID_PARAMS naming prefix', async () => {
    const response = await fetch(`${base}?prefix=${encodeURIComponent('bad\u0001')}`);
    expect(response.status).toBe(400);
    expect((await json(response)).error).toMatchObject({
      code: 'INVALID_PARAMS',
      field: 'prefix',
    });
  });

  it('answers 501 with a JSON error on a backend that cannot list', async () => {
    const backend = await embeddedBackend();
    // The real embedded backend, less its optional list(): what redlock and zookeeper look like.
    const { list: _list, ...rest } = backend;
    const unlisted: LockBackend = rest;
    const other = await startServer({ port: 0, backend: unlisted });
    try {
      const response = await fetch(`${other.httpUrl}/v1/locks`);
      expect(response.status).toBe(501);
      const body = await json(response);
      expect(body.error.code).toBe('METHOD_NOT_FOUND');
      expect(body.error.message).toContain('cannot list');
      // One lock still works without list().
      expect((await fetch(`${other.httpUrl}/v1/locks/x`)).status).toBe(200);
    } finally {
      await other.close();
      await backend.close();
    }
  });
});

describe('GET /v1/locks/{name}', () => {
  it('reports a held lock by its URL-encoded name, and a free one as not held', async () => {
    const peer = await session();
    const name = 'reports/2024 Q1/naïve ✓';
    const lease = (await peer.call('lock.acquire', { name, ttlMs: 20_000, owner: 'dora' })).result;
    const held = await json(await fetch(`${base}/${encodeURIComponent(name)}`));
    expect(held).toMatchObject({ name, held: true, owner: 'dora', token: lease.token, waiters: 0 });
    expect(held.ttlRemainingMs).toBeGreaterThan(15_000);

    const free = await json(await fetch(`${base}/${encodeURIComponent('reports/none')}`));
    expect(free).toEqual({
      name: 'reports/none',
      held: false,
      waiters: 0,
      waitersScope: 'server',
    });
    peer.close();
  });

  it('a name with a control character or broken encoding is INVALID_PARAMS naming name', async () => {
    for (const path of ['bad%01name', 'bad%E0%A4%A']) {
      const response = await fetch(`${base}/${path}`);
      expect(response.status).toBe(400);
      expect((await json(response)).error).toMatchObject({ code: 'INVALID_PARAMS', field: 'name' });
    }
  });

  it('other methods get 405 with Allow; unknown routes get a JSON 404', async () => {
    const post = await fetch(`${base}/x`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, DELETE');
    expect((await json(post)).error.code).toBe('METHOD_NOT_FOUND');
    const missing = await fetch(`${server.httpUrl}/nope`);
    expect(missing.status).toBe(404);
    expect((await json(missing)).error.code).toBe('NOT_FOUND');
  });

  it('plain HTTP on /v1/ws says it is the WebSocket endpoint (426), not "no route"', async () => {
    const plain = await fetch(`${server.httpUrl}/v1/ws`);
    expect(plain.status).toBe(426);
    expect(plain.headers.get('upgrade')).toBe('websocket');
    const { error } = await json(plain);
    expect(error.code).toBe('UPGRADE_REQUIRED');
    expect(error.message).toMatch(/^\/v1\/ws is the dlm protocol's WebSocket endpoint/);
    expect(error.message).toContain('dlm.v1.json');
  });
});

describe('DELETE /v1/locks/{name}', () => {
  it('revokes: the holder gets lock.lost (revoked), the next waiter gets a higher token, an audit line is written', async () => {
    const holder = await session();
    const waiter = await session();
    const name = 'jobs/revoke me';
    const lease = (await holder.call('lock.acquire', { name, ttlMs: 60_000, owner: 'hold-1' }))
      .result;
    const waiting = waiter.call('lock.acquire', {
      name,
      ttlMs: 5_000,
      waitMs: 20_000,
      owner: 'wait-1',
    });
    await new Promise((resolve) => setTimeout(resolve, 50));

    const response = await fetch(`${base}/${encodeURIComponent(name)}`, {
      method: 'DELETE',
      headers: { 'user-agent': 'admin-test' },
    });
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({
      revoked: true,
      name,
      owner: 'hold-1',
      token: lease.token,
    });

    const lost = await holder.nextNotification('lock.lost');
    expect(lost.params).toEqual({ name, token: lease.token, reason: 'revoked' });
    const granted = (await waiting).result;
    expect(granted.owner).toBe('wait-1');
    expect(BigInt(granted.token)).toBeGreaterThan(BigInt(lease.token));

    const audit = logLines.find((line) => line.msg === 'lock revoked' && line.name === name);
    expect(audit).toMatchObject({
      level: 'warn',
      audit: true,
      owner: 'hold-1',
      token: lease.token,
      userAgent: 'admin-test',
    });
    expect(typeof audit?.time).toBe('string');

    // The old holder's token no longer works.
    const stale = await holder.call('lock.release', { name, token: lease.token });
    expect(stale.error.data.code).toBe('NOT_HOLDER');
    holder.close();
    waiter.close();
  });

  it('a lock that is not held answers 404 NOT_FOUND', async () => {
    const response = await fetch(`${base}/never-held`, { method: 'DELETE' });
    expect(response.status).toBe(404);
    expect((await json(response)).error).toMatchObject({ code: 'NOT_FOUND' });
  });
});

describe('logs', () => {
  it('one JSON line per session open and close, none per acquire at info', async () => {
    const before = logLines.length;
    const peer = await connect(server.url);
    const { sessionId } = await peer.hello();
    const lease = (await peer.call('lock.acquire', { name: 'quiet', ttlMs: 5_000 })).result;
    await peer.call('lock.release', { name: 'quiet', token: lease.token });
    peer.close();
    await peer.closed;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const lines = logLines.slice(before);
    // Other tests' connections may close meanwhile: look at this session's lines, and at
    // whether anything mentions the lock.
    const mine = lines.filter((line) => line.session === sessionId);
    expect(mine.map((line) => line.msg)).toEqual(['session opened', 'session closed']);
    expect(mine[0]).toMatchObject({ level: 'info', pid: process.pid });
    expect(lines.some((line) => line.name === 'quiet')).toBe(false);
  });

  it('at debug level, grants and releases are logged too', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const debug = await startServer({
      port: 0,
      logger: createLogger('debug', (line) => lines.push(JSON.parse(line))),
    });
    try {
      const peer = await connect(debug.url);
      await peer.hello();
      const lease = (await peer.call('lock.acquire', { name: 'loud', ttlMs: 5_000 })).result;
      await peer.call('lock.release', { name: 'loud', token: lease.token });
      peer.close();
      expect(lines.find((line) => line.msg === 'lock granted')).toMatchObject({
        level: 'debug',
        name: 'loud',
        token: lease.token,
      });
      expect(lines.some((line) => line.msg === 'lock released')).toBe(true);
      expect(
        lines.some((line) => line.msg === 'backend attached' || line.msg === 'backend connected'),
      ).toBe(true);
    } finally {
      await debug.close();
    }
  });
});
