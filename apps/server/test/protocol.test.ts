import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type RunningServer, startServer } from '../src/index.js';
import { connect, openSession, type Peer } from './ws-peer.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let server: RunningServer;
beforeAll(async () => {
  server = await startServer({ port: 0 });
});
afterAll(async () => {
  await server.close();
});

const session = (): Promise<Peer> => openSession(server.url);

/** Two sessions, the first holding a fresh lock (named after `label`) for 10 s. */
async function twoSessionsOneHolding(label: string) {
  const a = await session();
  const b = await session();
  const name = `${label}-${Date.now()}`;
  const first = (await a.call('lock.acquire', { name, ttlMs: 10_000 })).result;
  return { a, b, name, first };
}

describe('connection and hello', () => {
  it('GET /healthz answers ok with the backend kind', async () => {
    const response = await fetch(`http://127.0.0.1:${server.port}/healthz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'ok', backend: 'embedded' });
  });

  it('session.hello reports the session, protocol, server, backend and limits', async () => {
    const peer = await connect(server.url);
    const hello = await peer.hello();
    expect(hello).toMatchObject({
      protocol: 'dlm.v1',
      server: { name: 'dlm' },
      backend: 'embedded',
      limits: {
        maxPayloadBytes: 65_536,
        maxNameBytes: 256,
        minTtlMs: 100,
        maxTtlMs: 86_400_000,
        maxWaitMs: 300_000,
      },
    });
    expect(typeof hello.sessionId).toBe('string');
    expect(hello.limits.maxInflight).toBeGreaterThan(0);
    const again = await peer.call('session.hello', {});
    expect(again.error).toMatchObject({
      code: -32600,
      data: { code: 'INVALID_REQUEST', retryable: false },
    });
    peer.close();
  });

  it('any method before session.hello gets HELLO_REQUIRED', async () => {
    const peer = await connect(server.url);
    const reply = await peer.call('lock.get', { name: 'x' });
    expect(reply.error).toMatchObject({ code: 1008, data: { code: 'HELLO_REQUIRED' } });
    await peer.hello();
    expect((await peer.call('lock.get', { name: 'x' })).result).toEqual({
      name: 'x',
      held: false,
      waiters: 0,
      waitersScope: 'server',
    });
    peer.close();
  });

  it('a client offering other subprotocols only is refused at the upgrade', async () => {
    const ws = new WebSocket(server.url, ['chat.v2']);
    const outcome = await new Promise<string>((resolve) => {
      ws.on('open', () => resolve('open'));
      ws.on('unexpected-response', (_req, res) => resolve(`http ${res.statusCode}`));
      ws.on('error', () => resolve('error'));
    });
    expect(outcome).toBe('http 400');
  });

  it('a client offering no subprotocol is accepted and spoken to in v1', async () => {
    const peer = await connect(server.url, undefined);
    expect((await peer.hello()).protocol).toBe('dlm.v1');
    peer.close();
  });

  it('another path is not the WebSocket endpoint', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${server.port}/other`);
    const outcome = await new Promise<string>((resolve) => {
      ws.on('open', () => resolve('open'));
      ws.on('unexpected-response', (_req, res) => resolve(`http ${res.statusCode}`));
      ws.on('error', () => resolve('error'));
    });
    expect(outcome).toBe('http 404');
  });
});

describe('protocol errors leave the connection usable', () => {
  it('a frame that is not JSON gets PARSE_ERROR with id null', async () => {
    const peer = await session();
    const reply = await peer.raw('{"jsonrpc": "2.0", "id": 1,');
    expect(reply).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32700, data: { code: 'PARSE_ERROR' } },
    });
    expect((await peer.call('session.ping')).result).toEqual({});
    peer.close();
  });

  it('a batch, a non-object, a binary frame and a missing id are INVALID_REQUEST', async () => {
    const peer = await session();
    for (const frame of [
      '[{"jsonrpc":"2.0","id":1,"method":"session.ping"}]',
      '42',
      '"x"',
      'null',
    ]) {
      expect((await peer.raw(frame)).error).toMatchObject({
        code: -32600,
        data: { code: 'INVALID_REQUEST' },
      });
    }
    expect(
      (await peer.raw(Buffer.from('{"jsonrpc":"2.0","id":9,"method":"session.ping"}'))).error.code,
    ).toBe(-32600);
    expect((await peer.raw('{"jsonrpc":"2.0","method":"session.ping"}')).error.code).toBe(-32600);
    expect(
      (await peer.raw('{"jsonrpc":"1.0","id":"a","method":"session.ping"}', 'a')).error.code,
    ).toBe(-32600);
    expect((await peer.raw('{"jsonrpc":"2.0","id":{},"method":"session.ping"}')).error.code).toBe(
      -32600,
    );
    expect((await peer.call('session.ping')).result).toEqual({});
    peer.close();
  });

  it('an unknown method gets METHOD_NOT_FOUND', async () => {
    const peer = await session();
    const reply = await peer.call('lock.steal', { name: 'x' });
    expect(reply.error).toMatchObject({
      code: -32601,
      data: { code: 'METHOD_NOT_FOUND', retryable: false },
    });
    expect((await peer.call('session.ping')).result).toEqual({});
    peer.close();
  });

  it('a bad field gets INVALID_PARAMS naming the field', async () => {
    const peer = await session();
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['lock.acquire', { name: '', ttlMs: 1000 }, 'name'],
      ['lock.acquire', { name: 'a\u0001', ttlMs: 1000 }, 'name'],
      ['lock.acquire', { name: 'x'.repeat(257), ttlMs: 1000 }, 'name'],
      ['lock.acquire', { name: 'a', ttlMs: 99 }, 'ttlMs'],
      ['lock.acquire', { name: 'a', ttlMs: '1000' }, 'ttlMs'],
      ['lock.acquire', { name: 'a', ttlMs: 1000, waitMs: 300_001 }, 'waitMs'],
      ['lock.acquire', { name: 'a', ttlMs: 1000, owner: 'o'.repeat(129) }, 'owner'],
      ['lock.release', { name: 'a', token: 5 }, 'token'],
      ['lock.release', { name: 'a', token: '0' }, 'token'],
      ['lock.release', { name: 'a', token: '9223372036854775808' }, 'token'],
      ['lock.extend', { name: 'a', token: '1', ttlMs: 0 }, 'ttlMs'],
      ['lock.get', {}, 'name'],
      ['lock.unwatch', { watchId: 'nope' }, 'watchId'],
    ];
    for (const [method, params, field] of cases) {
      const reply = await peer.call(method, params);
      expect(reply.error, `${method} ${JSON.stringify(params)}`).toMatchObject({
        code: -32602,
        data: { code: 'INVALID_PARAMS', field, retryable: false },
      });
    }
    expect(
      (await peer.raw('{"jsonrpc":"2.0","id":7,"method":"lock.get","params":[1]}', 7)).error.data
        .field,
    ).toBe('params');
    // Unknown extra fields are ignored.
    const ok = await peer.call('lock.get', { name: 'extra', colour: 'blue' });
    expect(ok.result).toEqual({ name: 'extra', held: false, waiters: 0, waitersScope: 'server' });
    peer.close();
  });

  it('an oversize frame closes that connection with 1009 and the server keeps serving', async () => {
    const peer = await session();
    peer.ws.send(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'session.ping',
        params: { pad: 'x'.repeat(70_000) },
      }),
    );
    expect((await peer.closed).code).toBe(1009);
    const other = await session();
    expect((await other.call('session.ping')).result).toEqual({});
    other.close();
  });
});

describe('locks over the wire', () => {
  it('acquire, get, extend, release with decimal-string tokens', async () => {
    const peer = await session();
    const name = `wire-${Date.now()}`;
    const acquired = await peer.call('lock.acquire', { name, ttlMs: 5_000, owner: 'me' });
    expect(acquired.result).toMatchObject({ name, owner: 'me', ttlMs: 5_000 });
    const token = acquired.result.token as string;
    expect(token).toMatch(/^[1-9][0-9]*$/);
    const got = await peer.call('lock.get', { name });
    expect(got.result).toMatchObject({ name, held: true, owner: 'me', token });
    expect(got.result.ttlRemainingMs).toBeLessThanOrEqual(5_000);
    expect((await peer.call('lock.extend', { name, token, ttlMs: 8_000 })).result).toEqual({
      name,
      token,
      ttlMs: 8_000,
    });
    const stale = await peer.call('lock.release', { name, token: (BigInt(token) + 1n).toString() });
    expect(stale.error).toMatchObject({
      code: 1002,
      data: { code: 'NOT_HOLDER', retryable: false },
    });
    expect((await peer.call('lock.release', { name, token })).result).toEqual({ released: true });
    expect((await peer.call('lock.get', { name })).result).toEqual({
      name,
      held: false,
      waiters: 0,
      waitersScope: 'server',
    });
    peer.close();
  });

  it('the owner defaults to the session id; a try-lock on a held lock is LOCK_HELD with the remaining lease', async () => {
    const a = await connect(server.url);
    const hello = await a.hello();
    const b = await session();
    const name = `held-${Date.now()}`;
    const acquired = await a.call('lock.acquire', { name, ttlMs: 10_000 });
    expect(acquired.result.owner).toBe(hello.sessionId);
    const refused = await b.call('lock.acquire', { name, ttlMs: 1_000 });
    expect(refused.error).toMatchObject({
      code: 1001,
      data: { code: 'LOCK_HELD', retryable: true },
    });
    expect(refused.error.data.ttlRemainingMs).toBeGreaterThan(0);
    expect(refused.error.data.ttlRemainingMs).toBeLessThanOrEqual(10_000);
    a.close();
    b.close();
  });

  it('a server-side wait is granted on release, with a higher token', async () => {
    const { a, b, name, first } = await twoSessionsOneHolding('wait');
    const waiting = b.call('lock.acquire', { name, ttlMs: 10_000, waitMs: 10_000 });
    await sleep(50);
    await a.call('lock.release', { name, token: first.token });
    const granted = (await waiting).result;
    expect(BigInt(granted.token)).toBeGreaterThan(BigInt(first.token));
    a.close();
    b.close();
  });

  it("a closed connection's pending wait ends and is never granted", async () => {
    const { a, b, name, first } = await twoSessionsOneHolding('gone');
    b.ws.send(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 99,
        method: 'lock.acquire',
        params: { name, ttlMs: 10_000, waitMs: 10_000 },
      }),
    );
    await sleep(50);
    b.close();
    await b.closed;
    await a.call('lock.release', { name, token: first.token });
    await sleep(100);
    expect((await a.call('lock.get', { name })).result).toEqual({
      name,
      held: false,
      waiters: 0,
      waitersScope: 'server',
    });
    a.close();
  });

  it("a connection's held locks outlive it and can be released from another with the lease's key, not the token alone", async () => {
    const a = await session();
    const name = `outlive-${Date.now()}`;
    const lease = (await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'worker' })).result;
    a.close();
    await a.closed;
    const b = await session();
    expect((await b.call('lock.get', { name })).result).toMatchObject({
      held: true,
      token: lease.token,
    });
    expect(
      (await b.call('lock.extend', { name, token: lease.token, ttlMs: 5_000 })).error.data.code,
    ).toBe('NOT_HOLDER');
    const { leaseKey } = lease;
    expect(
      (await b.call('lock.extend', { name, token: lease.token, ttlMs: 5_000, leaseKey })).result
        .token,
    ).toBe(lease.token);
    expect((await b.call('lock.release', { name, token: lease.token, leaseKey })).result).toEqual({
      released: true,
    });
    b.close();
  });

  it('the holder is told lock.lost when its lease expires', async () => {
    const peer = await session();
    const name = `lost-${Date.now()}`;
    const lease = (await peer.call('lock.acquire', { name, ttlMs: 200 })).result;
    const lost = await peer.nextNotification('lock.lost', 3_000);
    expect(lost).toEqual({
      jsonrpc: '2.0',
      method: 'lock.lost',
      params: { name, token: lease.token, reason: 'expired' },
    });
    peer.close();
  });

  it('watch reports grants, releases and expiries; unwatch stops it', async () => {
    const watcher = await session();
    const holder = await session();
    const name = `watch-${Date.now()}`;
    const watch = (await watcher.call('lock.watch', { name })).result;
    expect(watch).toMatchObject({ held: false });
    const lease = (await holder.call('lock.acquire', { name, ttlMs: 5_000, owner: 'h' })).result;
    expect((await watcher.nextNotification('lock.changed')).params).toEqual({
      watchId: watch.watchId,
      name,
      held: true,
      owner: 'h',
      token: lease.token,
      mode: 'exclusive',
      holders: 1,
    });
    await holder.call('lock.release', { name, token: lease.token });
    expect((await watcher.nextNotification('lock.changed')).params).toEqual({
      watchId: watch.watchId,
      name,
      held: false,
      holders: 0,
    });
    await holder.call('lock.acquire', { name, ttlMs: 150 });
    await watcher.nextNotification('lock.changed');
    expect((await watcher.nextNotification('lock.changed', 3_000)).params).toMatchObject({
      held: false,
    });
    expect((await watcher.call('lock.unwatch', { watchId: watch.watchId })).result).toEqual({});
    await holder.call('lock.acquire', { name, ttlMs: 1_000 });
    await sleep(100);
    expect(watcher.notifications).toEqual([]);
    watcher.close();
    holder.close();
  });

  it('requests past maxInflight get LIMIT_EXCEEDED', async () => {
    const small = await startServer({ port: 0, maxInflight: 2 });
    const a = await connect(small.url);
    await a.hello();
    const name = `inflight-${Date.now()}`;
    await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'h' });
    const w1 = a.call('lock.acquire', { name, ttlMs: 1_000, waitMs: 2_000 });
    const w2 = a.call('lock.acquire', { name, ttlMs: 1_000, waitMs: 2_000 });
    await sleep(30);
    const third = await a.call('session.ping');
    expect(third.error).toMatchObject({
      code: 1006,
      data: { code: 'LIMIT_EXCEEDED', retryable: true },
    });
    await Promise.all([w1, w2]);
    a.close();
    await small.close();
  });

  it('shutdown ends pending waits with CANCELLED', async () => {
    const own = await startServer({ port: 0 });
    const a = await connect(own.url);
    await a.hello();
    const name = `shutdown-${Date.now()}`;
    await a.call('lock.acquire', { name, ttlMs: 10_000, owner: 'h' });
    const waiting = a.call('lock.acquire', { name, ttlMs: 1_000, waitMs: 10_000 });
    await sleep(30);
    await own.close();
    expect((await waiting).error).toMatchObject({ code: 1007, data: { code: 'CANCELLED' } });
    expect((await a.closed).code).toBe(1001);
  });
});
