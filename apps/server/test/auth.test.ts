import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createAuthenticator,
  createLogger,
  hashToken,
  newToken,
  parseConfig,
  parseTokenFile,
  type RunningServer,
  startServer,
  type TokenGrant,
} from '../src/index.js';
import { connect, type Peer, upgradeOutcome } from './ws-peer.js';

const ADMIN = newToken();
const JOBS = newToken();
const WATCHER = newToken();
const GRANTS: TokenGrant[] = [
  { name: 'ops', sha256: hashToken(ADMIN), actions: ['lock', 'watch', 'admin'] },
  { name: 'jobs-runner', sha256: hashToken(JOBS), prefixes: ['jobs/'] },
  { name: 'jobs-viewer', sha256: hashToken(WATCHER), prefixes: ['jobs/'], actions: ['watch'] },
];

let server: RunningServer;
const peers: Peer[] = [];

async function session(token: string): Promise<Peer> {
  const peer = await connect(server.url);
  peers.push(peer);
  await peer.hello(token);
  return peer;
}

beforeAll(async () => {
  server = await startServer({ port: 0, auth: GRANTS });
});
afterAll(async () => {
  for (const peer of peers) peer.close();
  await server.close();
});

describe('authentication', () => {
  it('session.hello without a token gets UNAUTHENTICATED and the connection closes with 4004', async () => {
    const peer = await connect(server.url);
    const reply = await peer.call('session.hello', { client: { name: 't', version: '0' } });
    expect(reply.error).toMatchObject({
      code: 1004,
      data: { code: 'UNAUTHENTICATED', retryable: false },
    });
    expect(await peer.closed).toEqual({ code: 4004, reason: 'unauthenticated' });
  });

  it('a wrong token, even one character off, gets UNAUTHENTICATED and 4004', async () => {
    const peer = await connect(server.url);
    const wrong = `${JOBS.slice(0, -1)}${JOBS.endsWith('A') ? 'B' : 'A'}`;
    const reply = await peer.call('session.hello', { auth: wrong });
    expect(reply.error.data.code).toBe('UNAUTHENTICATED');
    expect((await peer.closed).code).toBe(4004);
  });

  it('auth that is not a string is INVALID_PARAMS naming auth', async () => {
    const peer = await connect(server.url);
    peers.push(peer);
    const reply = await peer.call('session.hello', { auth: 42 });
    expect(reply.error).toMatchObject({ code: -32602, data: { field: 'auth' } });
  });

  it('nothing but session.hello is served before authentication', async () => {
    const peer = await connect(server.url);
    peers.push(peer);
    const reply = await peer.call('lock.acquire', { name: 'jobs/a', ttlMs: 1_000 });
    expect(reply.error.data.code).toBe('HELLO_REQUIRED');
  });

  it('a valid token in session.hello opens the session', async () => {
    const peer = await session(JOBS);
    const lease = await peer.call('lock.acquire', { name: 'jobs/hello', ttlMs: 5_000 });
    expect(lease.result.token).toMatch(/^\d+$/);
  });

  it('a valid Authorization: Bearer header on the upgrade authenticates without auth in hello', async () => {
    const peer = await connect(server.url, undefined, {
      headers: { authorization: `Bearer ${JOBS}` },
    });
    peers.push(peer);
    await peer.hello();
    expect((await peer.call('lock.get', { name: 'jobs/x' })).result).toEqual({
      name: 'jobs/x',
      held: false,
      waiters: 0,
      waitersScope: 'server',
    });
  });

  it('an invalid or malformed Authorization header is refused at the upgrade with 401', async () => {
    expect(await upgradeOutcome(server.url, { headers: { authorization: 'Bearer nope' } })).toBe(
      'http 401',
    );
    expect(await upgradeOutcome(server.url, { headers: { authorization: `Basic ${JOBS}` } })).toBe(
      'http 401',
    );
    expect(await upgradeOutcome(server.url, { headers: { authorization: `Bearer ${JOBS}` } })).toBe(
      'open',
    );
  });

  it('the authenticator keeps only hashes and compares the presented token with each', () => {
    const auth = createAuthenticator(GRANTS);
    expect(auth.required).toBe(true);
    expect(auth.verify(ADMIN)?.name).toBe('ops');
    expect(auth.verify(WATCHER)?.actions.has('lock')).toBe(false);
    expect(auth.verify(hashToken(ADMIN))).toBeNull();
    expect(auth.verify('')).toBeNull();
    expect(createAuthenticator([]).required).toBe(false);
  });
});

describe('permissions', () => {
  it('a token may lock names under its prefixes only: elsewhere FORBIDDEN (1005)', async () => {
    const peer = await session(JOBS);
    const own = await peer.call('lock.acquire', { name: 'jobs/build', ttlMs: 5_000 });
    expect(own.result).toBeDefined();
    const other = await peer.call('lock.acquire', { name: 'deploy/prod', ttlMs: 5_000 });
    expect(other.error).toMatchObject({
      code: 1005,
      data: { code: 'FORBIDDEN', retryable: false },
    });
    const admin = await session(ADMIN);
    const theirs = (await admin.call('lock.acquire', { name: 'deploy/prod', ttlMs: 5_000 })).result;
    // Knowing another prefix's token does not let a client release or extend it.
    for (const [method, params] of [
      ['lock.release', { name: 'deploy/prod', token: theirs.token }],
      ['lock.extend', { name: 'deploy/prod', token: theirs.token, ttlMs: 5_000 }],
      ['lock.get', { name: 'deploy/prod' }],
      ['lock.check', { name: 'deploy/prod', token: theirs.token }],
      ['lock.watch', { name: 'deploy/prod' }],
      ['lock.watchPrefix', { prefix: '' }],
      ['lock.watchPrefix', { prefix: 'jo' }],
    ] as const) {
      expect((await peer.call(method, params)).error?.data.code, method).toBe('FORBIDDEN');
    }
    expect((await admin.call('lock.get', { name: 'deploy/prod' })).result.token).toBe(theirs.token);
    expect((await peer.call('lock.watchPrefix', { prefix: 'jobs/b' })).result.watchId).toBeTruthy();
  });

  it('a watch-only token may get and watch but not lock', async () => {
    const peer = await session(WATCHER);
    expect(
      (await peer.call('lock.acquire', { name: 'jobs/w', ttlMs: 5_000 })).error.data.code,
    ).toBe('FORBIDDEN');
    expect((await peer.call('lock.get', { name: 'jobs/w' })).result.held).toBe(false);
    expect((await peer.call('lock.check', { name: 'jobs/w', token: '1' })).result.current).toBe(
      false,
    );
    expect((await peer.call('lock.watch', { name: 'jobs/w' })).result.watchId).toBeTruthy();
    expect((await peer.call('lock.watchPrefix', { prefix: 'jobs/' })).result.locks).toBeInstanceOf(
      Array,
    );
  });

  it('an invalid name is INVALID_PARAMS before it is FORBIDDEN', async () => {
    const peer = await session(JOBS);
    expect((await peer.call('lock.acquire', { name: '', ttlMs: 5_000 })).error.data.code).toBe(
      'INVALID_PARAMS',
    );
  });
});

describe('HTTP endpoints with tokens', () => {
  const get = (path: string, token?: string, init: RequestInit = {}) =>
    fetch(`${server.httpUrl}${path}`, {
      ...init,
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });

  it('/healthz and the dashboard stay open; /metrics needs any valid token', async () => {
    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/')).status).toBe(200);
    const anonymous = await get('/metrics');
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe('Bearer realm="dlm"');
    expect(((await anonymous.json()) as any).error.code).toBe('UNAUTHENTICATED');
    expect((await get('/metrics', 'wrong')).status).toBe(401);
    const scraped = await get('/metrics', WATCHER);
    expect(scraped.status).toBe(200);
    expect(await scraped.text()).toMatch(
      /dlm_connections_rejected_total\{reason="unauthenticated"\} [1-9]/,
    );
  });

  it('the admin API needs admin on the names concerned: 401 without a token, 403 without admin', async () => {
    const holder = await session(JOBS);
    const lease = (await holder.call('lock.acquire', { name: 'jobs/revoke-me', ttlMs: 30_000 }))
      .result;
    const path = `/v1/locks/${encodeURIComponent('jobs/revoke-me')}`;
    expect((await get(path)).status).toBe(401);
    expect((await get('/v1/locks', JOBS)).status).toBe(403);
    const refused = await get(path, JOBS, { method: 'DELETE' });
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as any).error.code).toBe('FORBIDDEN');
    expect((await holder.call('lock.get', { name: 'jobs/revoke-me' })).result.token).toBe(
      lease.token,
    );

    const listed = await get('/v1/locks?prefix=jobs/', ADMIN);
    expect(listed.status).toBe(200);
    expect(((await listed.json()) as any).locks.map((l: { name: string }) => l.name)).toContain(
      'jobs/revoke-me',
    );
    const revoked = await get(path, ADMIN, { method: 'DELETE' });
    expect(revoked.status).toBe(200);
    expect(await holder.nextNotification('lock.lost')).toMatchObject({
      params: { name: 'jobs/revoke-me', token: lease.token, reason: 'revoked' },
    });
  });
});

describe('token configuration', () => {
  const hash = hashToken('t0k3n');

  it('reads JSON and line files; omitted prefixes mean every name, omitted actions lock+watch', () => {
    const json = parseTokenFile(
      JSON.stringify({ tokens: [{ name: 'a', sha256: hash.toUpperCase(), prefixes: ['x/'] }] }),
    );
    expect(json).toEqual([{ name: 'a', sha256: hash, prefixes: ['x/'] }]);
    const lines = parseTokenFile(
      `# name sha256 actions prefixes\nops ${hash} admin,lock\n\nci ${hashToken('other')}   lock  jobs/ builds/ # CI\n`,
    );
    expect(lines).toEqual([
      { name: 'ops', sha256: hash, actions: ['admin', 'lock'] },
      { name: 'ci', sha256: hashToken('other'), actions: ['lock'], prefixes: ['jobs/', 'builds/'] },
    ]);
    const auth = createAuthenticator(lines);
    expect(auth.verify('t0k3n')?.prefixes).toEqual(['']);
    expect([...createAuthenticator(json).verify('t0k3n')!.actions]).toEqual(['lock', 'watch']);
  });

  it('rejects a bad hash, an unknown action, a duplicate and broken JSON', () => {
    expect(() => parseTokenFile('a deadbeef')).toThrow(/sha256 must be 64 hex/);
    expect(() => parseTokenFile(`a ${hash} lock,root`)).toThrow(/actions/);
    expect(() => parseTokenFile(`a ${hash}\nb ${hash}`)).toThrow(/twice/);
    expect(() => parseTokenFile('{"tokens": [')).toThrow(/JSON/);
    expect(() => parseTokenFile('[{"sha256": "x"}]')).toThrow(/name/);
  });

  it('parseConfig takes tokens from DLM_AUTH_TOKENS, refuses two sources and an empty file', () => {
    const config = parseConfig([], { DLM_AUTH_TOKENS: `ops ${hash} admin` });
    expect(config?.auth).toEqual([{ name: 'ops', sha256: hash, actions: ['admin'] }]);
    expect(() =>
      parseConfig(['--auth-file', '/nonexistent'], { DLM_AUTH_TOKENS: `ops ${hash}` }),
    ).toThrow(/not both/);
    expect(() => parseConfig(['--auth-file', '/nonexistent/tokens'], {})).toThrow(/cannot read/);
    expect(() => parseConfig([], { DLM_AUTH_TOKENS: '# nothing' })).toThrow(/no tokens/);
  });
});

describe('binding without tokens', () => {
  it('refuses a non-loopback address unless insecure, and then logs a warning', async () => {
    await expect(startServer({ host: '0.0.0.0', port: 0 })).rejects.toThrow(
      /without authentication.*--insecure/,
    );
    const lines: string[] = [];
    const insecure = await startServer({
      host: '0.0.0.0',
      port: 0,
      insecure: true,
      logger: createLogger('warn', (line) => lines.push(line)),
    });
    await insecure.close();
    expect(lines.some((line) => line.includes('no authentication on a non-loopback address'))).toBe(
      true,
    );
    const withTokens = await startServer({ host: '0.0.0.0', port: 0, auth: GRANTS });
    await withTokens.close();
  });

  it('a server without tokens ignores credentials, in the header and in hello', async () => {
    const open = await startServer({ port: 0 });
    try {
      expect(await upgradeOutcome(open.url, { headers: { authorization: 'Basic whatever' } })).toBe(
        'open',
      );
      const peer = await connect(open.url, undefined, {
        headers: { authorization: 'Bearer not-a-token' },
      });
      peers.push(peer);
      expect((await peer.hello('anything')).sessionId).toBeTruthy();
    } finally {
      await open.close();
    }
  });

  it('parseConfig reads --insecure and DLM_INSECURE', () => {
    expect(parseConfig(['--insecure'], {})?.insecure).toBe(true);
    expect(parseConfig([], { DLM_INSECURE: '1' })?.insecure).toBe(true);
    expect(parseConfig([], {})?.insecure).toBe(false);
  });
});

/** The release-request counter's value for `event` in the server's metrics. */
async function requests(event: 'asked' | 'delivered'): Promise<number> {
  const response = await fetch(`${server.httpUrl}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  const text = await response.text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`dlm_release_requests_total{event="${event}"}`));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

describe('lock.requestRelease on the server', () => {
  it('needs the lock permission on the name: watch alone, or another prefix, is FORBIDDEN', async () => {
    const viewer = await session(WATCHER);
    const denied = await viewer.call('lock.requestRelease', { name: 'jobs/a' });
    expect(denied.error?.data).toMatchObject({ code: 'FORBIDDEN' });
    const runner = await session(JOBS);
    const elsewhere = await runner.call('lock.requestRelease', { name: 'other/a' });
    expect(elsewhere.error?.data).toMatchObject({ code: 'FORBIDDEN' });
    const allowed = await runner.call('lock.requestRelease', { name: 'jobs/a' });
    expect(allowed.result).toEqual({ name: 'jobs/a', notified: 0 });
  });

  it('counts requests asked and heard, and the feed shows the request', async () => {
    const [askedBefore, deliveredBefore] = [await requests('asked'), await requests('delivered')];
    const holder = await session(JOBS);
    await holder.call('lock.acquire', { name: 'jobs/counted', ttlMs: 10_000 });
    const asker = await session(ADMIN);
    const reply = await asker.call('lock.requestRelease', { name: 'jobs/counted', reason: 'r' });
    expect(reply.result).toEqual({ name: 'jobs/counted', notified: 1 });
    const heard = await holder.nextNotification('lock.releaseRequested');
    expect(heard.params).toMatchObject({ name: 'jobs/counted', reason: 'r' });
    // A free name asks nobody: not counted.
    await asker.call('lock.requestRelease', { name: 'jobs/free' });
    expect((await requests('asked')) - askedBefore).toBe(1);
    expect((await requests('delivered')) - deliveredBefore).toBe(1);
    const feed = await fetch(`${server.httpUrl}/v1/feed?prefix=jobs/`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    const { events } = (await feed.json()) as { events: Array<{ type: string; name: string }> };
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'releaseRequested', name: 'jobs/counted' }),
    );
  });

  it('is served over POST /v1/rpc too', async () => {
    const holder = await session(JOBS);
    await holder.call('lock.acquire', { name: 'jobs/http', ttlMs: 10_000 });
    const response = await fetch(`${server.httpUrl}/v1/rpc`, {
      method: 'POST',
      headers: { authorization: `Bearer ${JOBS}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'lock.requestRelease',
        params: { name: 'jobs/http' },
      }),
    });
    expect(await response.json()).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { name: 'jobs/http', notified: 1 },
    });
    const heard = await holder.nextNotification('lock.releaseRequested');
    expect(heard.params).toEqual({ name: 'jobs/http', token: expect.any(String) });
  });
});
