import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { afterAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { abandonedRpc, rpc } from './http-peer.js';
import { embeddedServerFixture } from './support.js';

const fixture = embeddedServerFixture();
const url = () => fixture.server.httpUrl;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('POST /v1/rpc: the lock methods over plain HTTP', () => {
  it('acquire, get, extend and release with the lease key, each answered with HTTP 200', async () => {
    const grant = await rpc(url(), 'lock.acquire', { name: 'h/basic', ttlMs: 5_000, owner: 'o' });
    expect(grant.status).toBe(200);
    expect(grant.headers.get('content-type')).toMatch(/^application\/json/);
    const { token, leaseKey } = grant.body.result;
    expect(grant.body.result).toMatchObject({ name: 'h/basic', owner: 'o', mode: 'exclusive' });
    expect(leaseKey).toMatch(/^[A-Za-z0-9_-]{22,128}$/);
    expect((await rpc(url(), 'lock.get', { name: 'h/basic' })).body.result).toMatchObject({
      held: true,
      owner: 'o',
      token,
    });
    const extended = await rpc(url(), 'lock.extend', {
      name: 'h/basic',
      token,
      leaseKey,
      ttlMs: 9_000,
    });
    expect(extended.body.result).toEqual({ name: 'h/basic', token, ttlMs: 9_000 });
    const released = await rpc(url(), 'lock.release', { name: 'h/basic', token, leaseKey });
    expect(released.body).toMatchObject({ id: expect.any(Number), result: { released: true } });
    expect((await rpc(url(), 'lock.get', { name: 'h/basic' })).body.result.held).toBe(false);
  });

  it('without the lease key (there is no session) release and extend are NOT_HOLDER', async () => {
    const { token } = (await rpc(url(), 'lock.acquire', { name: 'h/nokey', ttlMs: 5_000 })).body
      .result;
    for (const [method, params] of [
      ['lock.release', { name: 'h/nokey', token }],
      ['lock.extend', { name: 'h/nokey', token, ttlMs: 5_000 }],
    ] as const) {
      const reply = await rpc(url(), method, params);
      expect(reply.status).toBe(200);
      expect(reply.body.error.data.code).toBe('NOT_HOLDER');
    }
    expect((await rpc(url(), 'lock.get', { name: 'h/nokey' })).body.result.token).toBe(token);
  });

  it('each acquire without an owner is its own requester: a second one is LOCK_HELD', async () => {
    await rpc(url(), 'lock.acquire', { name: 'h/owners', ttlMs: 5_000 });
    const second = await rpc(url(), 'lock.acquire', { name: 'h/owners', ttlMs: 5_000 });
    expect(second.body.error.data).toMatchObject({ code: 'LOCK_HELD', retryable: true });
  });

  it('acquireAll grants a set, each lease released with the one key', async () => {
    const reply = await rpc(url(), 'lock.acquireAll', {
      locks: [{ name: 'h/set-b' }, { name: 'h/set-a' }],
      ttlMs: 5_000,
    });
    const grants = reply.body.result.grants as Array<Record<string, string>>;
    expect(grants.map((g) => g.name)).toEqual(['h/set-b', 'h/set-a']);
    for (const { name, token, leaseKey } of grants) {
      expect((await rpc(url(), 'lock.release', { name, token, leaseKey })).body.result).toEqual({
        released: true,
      });
    }
  });

  it('a WebSocket holder and an HTTP waiter: the wait holds the request open until the release', async () => {
    const holder = await fixture.session();
    const held = (await holder.call('lock.acquire', { name: 'h/wait', ttlMs: 30_000 })).result;
    const started = performance.now();
    const waiting = rpc(url(), 'lock.acquire', { name: 'h/wait', ttlMs: 5_000, waitMs: 10_000 });
    await sleep(300);
    await holder.call('lock.release', { name: 'h/wait', token: held.token });
    const granted = await waiting;
    expect(BigInt(granted.body.result.token)).toBeGreaterThan(BigInt(held.token));
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
  });

  it("a wait that runs out is LOCK_HELD with the holder's lease left", async () => {
    await rpc(url(), 'lock.acquire', { name: 'h/deadline', ttlMs: 20_000, owner: 'h' });
    const started = performance.now();
    const reply = await rpc(url(), 'lock.acquire', {
      name: 'h/deadline',
      ttlMs: 5_000,
      waitMs: 300,
    });
    expect(reply.body.error.data.code).toBe('LOCK_HELD');
    expect(reply.body.error.data.ttlRemainingMs).toBeGreaterThan(15_000);
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
  });

  it('a client that goes away while its acquire waits cancels the wait: nothing is granted to it', async () => {
    const holder = await fixture.session();
    const held = (await holder.call('lock.acquire', { name: 'h/gone', ttlMs: 30_000 })).result;
    const answered = await abandonedRpc(
      url(),
      'lock.acquire',
      { name: 'h/gone', ttlMs: 30_000, waitMs: 20_000, owner: 'gone' },
      300,
    );
    expect(answered).toBe('');
    const admin = async () =>
      (await (await fetch(`${url()}/v1/locks/h%2Fgone`)).json()) as Record<string, any>;
    // The server saw the client go: its wait left the queue.
    let waiters = (await admin()).waiters;
    for (let i = 0; i < 50 && waiters !== 0; i += 1) {
      await sleep(20);
      waiters = (await admin()).waiters;
    }
    expect(waiters).toBe(0);
    await holder.call('lock.release', { name: 'h/gone', token: held.token });
    await sleep(200);
    expect((await admin()).held).toBe(false);
    const next = await rpc(url(), 'lock.acquire', { name: 'h/gone', ttlMs: 5_000, owner: 'next' });
    expect(next.body.result.owner).toBe('next');
  });

  it('session methods and watches are WebSocket-only: METHOD_NOT_FOUND naming the transport', async () => {
    for (const method of ['session.hello', 'session.ping', 'lock.watch', 'lock.watchPrefix']) {
      const reply = await rpc(url(), method, { name: 'x', prefix: '' });
      expect(reply.status).toBe(200);
      expect(reply.body.error.data.code, method).toBe('METHOD_NOT_FOUND');
      expect(reply.body.error.message).toContain('WebSocket');
      expect(reply.body.error.message).toContain('lock.acquire');
    }
    const unknown = await rpc(url(), 'lock.nope', {});
    expect(unknown.body.error.data.code).toBe('METHOD_NOT_FOUND');
  });

  it('what the WebSocket refuses, the HTTP door refuses alike, with HTTP 200', async () => {
    const cases: Array<[string, string, string, unknown]> = [
      ['not JSON', '{"jsonrpc":', 'PARSE_ERROR', null],
      [
        'a batch',
        '[{"jsonrpc":"2.0","id":1,"method":"lock.get","params":{"name":"a"}}]',
        'INVALID_REQUEST',
        null,
      ],
      [
        'no id',
        '{"jsonrpc":"2.0","method":"lock.get","params":{"name":"a"}}',
        'INVALID_REQUEST',
        null,
      ],
      [
        'bad params',
        '{"jsonrpc":"2.0","id":"p","method":"lock.acquire","params":{"name":"","ttlMs":1000}}',
        'INVALID_PARAMS',
        'p',
      ],
    ];
    for (const [label, raw, code, id] of cases) {
      const reply = await rpc(url(), '', {}, { raw });
      expect(reply.status, label).toBe(200);
      expect(reply.body.id, label).toBe(id);
      expect(reply.body.error.data.code, label).toBe(code);
    }
  });

  it('transport refusals: 405 for GET, 415 without JSON, 413 over 64 KiB, each a JSON-RPC error', async () => {
    const get = await fetch(`${url()}/v1/rpc`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(((await get.json()) as any).error.data.code).toBe('METHOD_NOT_FOUND');
    const form = await fetch(`${url()}/v1/rpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'a=b',
    });
    expect(form.status).toBe(415);
    expect(((await form.json()) as any).error.data.code).toBe('INVALID_REQUEST');
    const big = await fetch(`${url()}/v1/rpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'lock.get',
        params: { pad: 'x'.repeat(70_000) },
      }),
    });
    expect(big.status).toBe(413);
    expect(((await big.json()) as any).error).toMatchObject({ data: { code: 'INVALID_REQUEST' } });
    // The server keeps serving.
    expect((await rpc(url(), 'lock.get', { name: 'h/after' })).body.result.held).toBe(false);
  });

  it('serves its OpenAPI document at /v1/openapi.json: the checked-in one', async () => {
    const response = await fetch(`${url()}/v1/openapi.json`);
    expect(response.status).toBe(200);
    const require = createRequire(import.meta.url);
    const checkedIn = JSON.parse(
      readFileSync(require.resolve('@dlm/protocol/openapi.json'), 'utf8'),
    );
    expect(await response.json()).toEqual(checkedIn);
  });
});

describe('POST /v1/rpc: tokens, origins and limits as on the WebSocket', () => {
  const ALL = newToken();
  const JOBS = newToken();
  let server: RunningServer;
  const started = (async () => {
    server = await startServer({
      port: 0,
      auth: [
        { name: 'all', sha256: hashToken(ALL) },
        { name: 'jobs', sha256: hashToken(JOBS), prefixes: ['jobs/'], actions: ['lock'] },
      ],
      limits: { maxInflight: 2, messagesPerSecond: 1_000, messageBurst: 1_000 },
    });
    return server;
  })();
  afterAll(async () => (await started).close());
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  it('no token or a bad one: HTTP 401 with a JSON-RPC UNAUTHENTICATED and WWW-Authenticate', async () => {
    const { httpUrl } = await started;
    const none = await rpc(httpUrl, 'lock.get', { name: 'jobs/a' });
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="dlm"');
    expect(none.body.error.data.code).toBe('UNAUTHENTICATED');
    const bad = await rpc(httpUrl, 'lock.get', { name: 'jobs/a' }, { headers: bearer('nope') });
    expect(bad.status).toBe(401);
    expect(bad.body.error.message).toContain('not valid');
  });

  it('a token works on its prefixes only: FORBIDDEN outside them', async () => {
    const { httpUrl } = await started;
    const ok = await rpc(
      httpUrl,
      'lock.acquire',
      { name: 'jobs/a', ttlMs: 5_000 },
      { headers: bearer(JOBS) },
    );
    expect(ok.body.result.name).toBe('jobs/a');
    const outside = await rpc(
      httpUrl,
      'lock.acquire',
      { name: 'other/a', ttlMs: 5_000 },
      { headers: bearer(JOBS) },
    );
    expect(outside.status).toBe(200);
    expect(outside.body.error.data.code).toBe('FORBIDDEN');
  });

  it('a browser page from another origin: HTTP 403', async () => {
    const { httpUrl } = await started;
    const reply = await rpc(
      httpUrl,
      'lock.get',
      { name: 'jobs/a' },
      { headers: { ...bearer(ALL), origin: 'https://evil.example' } },
    );
    expect(reply.status).toBe(403);
    expect(reply.body.error.data.code).toBe('FORBIDDEN');
  });

  it('requests in flight from one address are bounded: HTTP 429 with LIMIT_EXCEEDED', async () => {
    const { httpUrl } = await started;
    await rpc(
      httpUrl,
      'lock.acquire',
      { name: 'jobs/busy', ttlMs: 10_000, owner: 'h' },
      { headers: bearer(ALL) },
    );
    const waits = [1, 2].map((i) =>
      rpc(
        httpUrl,
        'lock.acquire',
        { name: 'jobs/busy', ttlMs: 5_000, waitMs: 1_000, owner: `w${i}` },
        { headers: bearer(ALL) },
      ),
    );
    await sleep(200);
    const third = await rpc(httpUrl, 'lock.get', { name: 'jobs/busy' }, { headers: bearer(ALL) });
    expect(third.status).toBe(429);
    expect(third.headers.get('retry-after')).toBe('1');
    expect(third.body.error.data).toMatchObject({ code: 'LIMIT_EXCEEDED', retryable: true });
    for (const wait of await Promise.all(waits))
      expect(wait.body.error.data.code).toBe('LOCK_HELD');
    expect(
      (await rpc(httpUrl, 'lock.get', { name: 'jobs/busy' }, { headers: bearer(ALL) })).status,
    ).toBe(200);
  });
});
