import { type Socket, connect as tcpConnect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import {
  DEFAULT_SERVER_LIMITS,
  parseConfig,
  type RunningServer,
  type ServerLimits,
  startServer,
} from '../src/index.js';
import { rawUpgrade } from './raw-socket.js';
import { connect, type Peer } from './ws-peer.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const servers: RunningServer[] = [];
const peers: Peer[] = [];
afterAll(async () => {
  for (const peer of peers) peer.close();
  await Promise.all(servers.map((server) => server.close()));
});

async function serve(limits: Partial<ServerLimits>): Promise<RunningServer> {
  const server = await startServer({ port: 0, limits });
  servers.push(server);
  return server;
}

async function session(server: RunningServer, options: WebSocket.ClientOptions = {}) {
  const peer = await connect(server.url, undefined, options);
  peers.push(peer);
  await peer.hello();
  return peer;
}

/** A server with `limits` on which one session holds the lock `name` (for 30 s). */
async function serveHolding(limits: Partial<ServerLimits>, name: string): Promise<RunningServer> {
  const server = await serve(limits);
  const holder = await session(server);
  await holder.call('lock.acquire', { name, ttlMs: 30_000 });
  return server;
}

async function metric(server: RunningServer, reason: string): Promise<number> {
  const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
  const match = new RegExp(`dlm_connections_rejected_total\\{reason="${reason}"\\} (\\d+)`).exec(
    text,
  );
  return Number(match?.[1]);
}

/** How an upgrade ends: `open` (the socket is kept in `kept`) or `http <status>`. */
function upgrade(
  url: string,
  kept: WebSocket[],
  options: WebSocket.ClientOptions = {},
): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, ['dlm.v1.json'], options);
    ws.on('open', () => {
      kept.push(ws);
      resolve('open');
    });
    ws.on('unexpected-response', (_req, res) => resolve(`http ${res.statusCode}`));
    ws.on('error', (error) => resolve(`error ${error.message}`));
  });
}

describe('per-session limits', () => {
  it('maxLocksPerSession: past it acquires get LIMIT_EXCEEDED; re-acquiring and releasing do not count against it', async () => {
    const server = await serve({ maxLocksPerSession: 3 });
    const peer = await session(server);
    const leases = [];
    for (const name of ['l/1', 'l/2', 'l/3']) {
      leases.push((await peer.call('lock.acquire', { name, ttlMs: 30_000, owner: 'me' })).result);
    }
    const over = await peer.call('lock.acquire', { name: 'l/4', ttlMs: 30_000 });
    expect(over.error).toMatchObject({
      code: 1006,
      data: { code: 'LIMIT_EXCEEDED', retryable: true },
    });
    // The same owner re-acquiring a lock it holds takes no new slot.
    expect(
      (await peer.call('lock.acquire', { name: 'l/1', ttlMs: 30_000, owner: 'me' })).result,
    ).toMatchObject({ token: leases[0].token });
    await peer.call('lock.release', { name: 'l/1', token: leases[0].token });
    expect((await peer.call('lock.acquire', { name: 'l/4', ttlMs: 30_000 })).result).toBeDefined();
    // Another session's release with the token alone is NOT_HOLDER, and frees no slot...
    const other = await session(server);
    await other.call('lock.release', { name: 'l/2', token: leases[1].token });
    expect((await peer.call('lock.acquire', { name: 'l/5', ttlMs: 30_000 })).error.data.code).toBe(
      'LIMIT_EXCEEDED',
    );
    // ...while a release through another session with the lease's key frees it.
    await other.call('lock.release', {
      name: 'l/2',
      token: leases[1].token,
      leaseKey: leases[1].leaseKey,
    });
    expect((await peer.call('lock.acquire', { name: 'l/5', ttlMs: 30_000 })).result).toBeDefined();
    // Each session has its own allowance.
    expect((await other.call('lock.acquire', { name: 'l/6', ttlMs: 30_000 })).result).toBeDefined();
  });

  it('maxLocksPerSession: a lease adopted by another session (extend) counts there, not here', async () => {
    const server = await serve({ maxLocksPerSession: 1 });
    const first = await session(server);
    const lease = (await first.call('lock.acquire', { name: 'a/1', ttlMs: 30_000 })).result;
    expect((await first.call('lock.acquire', { name: 'a/2', ttlMs: 30_000 })).error.data.code).toBe(
      'LIMIT_EXCEEDED',
    );
    const second = await session(server);
    await second.call('lock.extend', {
      name: 'a/1',
      token: lease.token,
      ttlMs: 30_000,
      leaseKey: lease.leaseKey,
    });
    expect((await first.call('lock.acquire', { name: 'a/2', ttlMs: 30_000 })).result).toBeDefined();
    expect(
      (await second.call('lock.acquire', { name: 'a/3', ttlMs: 30_000 })).error.data.code,
    ).toBe('LIMIT_EXCEEDED');
    // Closing a session does not release its leases, and frees nothing elsewhere.
    second.close();
    await second.closed;
    const third = await session(server);
    expect((await third.call('lock.acquire', { name: 'a/3', ttlMs: 30_000 })).result).toBeDefined();
  });

  it('maxLocksPerSession counts acquires still waiting', async () => {
    const server = await serveHolding({ maxLocksPerSession: 1 }, 'w/1');
    const waiter = await session(server);
    const waiting = waiter.call('lock.acquire', { name: 'w/1', ttlMs: 30_000, waitMs: 300 });
    await sleep(50);
    const second = await waiter.call('lock.acquire', { name: 'w/2', ttlMs: 30_000 });
    expect(second.error.data.code).toBe('LIMIT_EXCEEDED');
    expect((await waiting).error.data.code).toBe('LOCK_HELD');
  });

  it('maxWatchesPerSession: past it watches get LIMIT_EXCEEDED; unwatch frees one', async () => {
    const server = await serve({ maxWatchesPerSession: 2 });
    const peer = await session(server);
    const first = (await peer.call('lock.watch', { name: 'x' })).result;
    await peer.call('lock.watchPrefix', { prefix: 'y' });
    expect((await peer.call('lock.watch', { name: 'z' })).error.data.code).toBe('LIMIT_EXCEEDED');
    expect((await peer.call('lock.watchPrefix', { prefix: 'z' })).error.data.code).toBe(
      'LIMIT_EXCEEDED',
    );
    await peer.call('lock.unwatch', { watchId: first.watchId });
    expect((await peer.call('lock.watch', { name: 'z' })).result.watchId).toBeTruthy();
  });

  it('maxWaitersPerLock: past it a waiting acquire gets LIMIT_EXCEEDED', async () => {
    const server = await serveHolding({ maxWaitersPerLock: 2 }, 'q');
    const waiters = await Promise.all([session(server), session(server), session(server)]);
    const pending = waiters
      .slice(0, 2)
      .map((peer) => peer.call('lock.acquire', { name: 'q', ttlMs: 1_000, waitMs: 1_000 }));
    await sleep(50);
    const third = await waiters[2]!.call('lock.acquire', {
      name: 'q',
      ttlMs: 1_000,
      waitMs: 1_000,
    });
    expect(third.error.data.code).toBe('LIMIT_EXCEEDED');
    for (const reply of await Promise.all(pending)) expect(reply.error.data.code).toBe('LOCK_HELD');
  });

  it('maxInflight is taken from limits', async () => {
    const server = await serveHolding({ maxInflight: 1 }, 'i');
    const peer = await session(server);
    const waiting = peer.call('lock.acquire', { name: 'i', ttlMs: 1_000, waitMs: 300 });
    expect((await peer.call('session.ping')).error.data.code).toBe('LIMIT_EXCEEDED');
    await waiting;
    expect((await peer.call('session.ping')).result).toEqual({});
  });
});

describe('message rate', () => {
  it('frames past the burst get LIMIT_EXCEEDED until the bucket refills', async () => {
    const server = await serve({ messagesPerSecond: 20, messageBurst: 10 });
    const peer = await session(server);
    await sleep(600); // the hello took a token: let the bucket fill again
    const replies = await Promise.all(Array.from({ length: 15 }, () => peer.call('session.ping')));
    const limited = replies.filter((r) => r.error?.data.code === 'LIMIT_EXCEEDED');
    expect(replies.length - limited.length).toBe(10);
    expect(limited).toHaveLength(5);
    expect(limited[0]!.error.code).toBe(1006);
    await sleep(200); // 20/s: 4 tokens
    expect((await peer.call('session.ping')).result).toEqual({});
  });

  it('a connection that keeps sending at full speed while limited is closed with 4006', async () => {
    const server = await serve({ messagesPerSecond: 5, messageBurst: 5 });
    const peer = await session(server);
    for (let i = 0; i < 30; i += 1)
      peer.ws.send(JSON.stringify({ jsonrpc: '2.0', id: i, method: 'session.ping' }));
    expect(await peer.closed).toEqual({ code: 4006, reason: 'message rate exceeded' });
    expect(await metric(server, 'message_rate')).toBe(1);
  });
});

describe('connection limits', () => {
  it('maxConnectionsPerAddress: past it the upgrade gets 429; another address and a closed slot get in', async () => {
    const server = await serve({ maxConnectionsPerAddress: 2 });
    const kept: WebSocket[] = [];
    expect(await upgrade(server.url, kept)).toBe('open');
    expect(await upgrade(server.url, kept)).toBe('open');
    expect(await upgrade(server.url, kept)).toBe('http 429');
    // Linux routes all of 127.0.0.0/8 to loopback: 127.0.0.2 is another address.
    expect(await upgrade(server.url, kept, { localAddress: '127.0.0.2' })).toBe('open');
    kept[0]!.close();
    await new Promise((resolve) => kept[0]!.once('close', resolve));
    await sleep(50);
    expect(await upgrade(server.url, kept)).toBe('open');
    expect(await metric(server, 'address_limit')).toBe(1);
    for (const ws of kept) ws.close();
  });

  it('maxConnections: past it the upgrade gets 503', async () => {
    const server = await serve({ maxConnections: 2 });
    const kept: WebSocket[] = [];
    expect(await upgrade(server.url, kept)).toBe('open');
    expect(await upgrade(server.url, kept, { localAddress: '127.0.0.3' })).toBe('open');
    expect(await upgrade(server.url, kept, { localAddress: '127.0.0.4' })).toBe('http 503');
    for (const ws of kept) ws.close();
  });
});

describe('timeouts and dead peers', () => {
  it('a connection without session.hello within helloTimeoutMs is closed with 4008', async () => {
    const server = await serve({ helloTimeoutMs: 300 });
    const silent = await connect(server.url);
    const greeted = await session(server);
    const startedAt = Date.now();
    expect(await silent.closed).toEqual({ code: 4008, reason: 'no session.hello in time' });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(250);
    await sleep(200);
    expect(greeted.ws.readyState).toBe(WebSocket.OPEN);
    expect((await greeted.call('session.ping')).result).toEqual({});
  });

  it('a peer that stops answering pings is dropped within two ping intervals; a live one stays', async () => {
    const server = await serve({ pingIntervalMs: 150 });
    const live = await session(server);
    const dead = await rawUpgrade(server.port);
    dead.sendText(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'session.hello' }));
    const startedAt = Date.now();
    // The raw peer never reads, so it never answers a ping.
    while ((await metric(server, 'no_pong')) === 0 && Date.now() - startedAt < 3_000)
      await sleep(25);
    expect(await metric(server, 'no_pong')).toBe(1);
    expect(Date.now() - startedAt).toBeLessThan(1_000);
    expect(((await (await fetch(`${server.httpUrl}/healthz`)).json()) as any).sessions).toBe(1);
    dead.socket.destroy();
    await sleep(400);
    expect(live.ws.readyState).toBe(WebSocket.OPEN);
    expect((await live.call('session.ping')).result).toEqual({});
  });

  it('a slow reader is dropped once maxBufferedBytes are queued for it, instead of buffering without bound', async () => {
    const server = await serve({ maxBufferedBytes: 256 * 1024, maxWatchesPerSession: 100_000 });
    const writer = await session(server);
    const long = 'n'.repeat(200);
    for (let i = 0; i < 200; i += 1) {
      await writer.call('lock.acquire', { name: `slow/${long}/${i}`, ttlMs: 60_000 });
    }
    const reader = await rawUpgrade(server.port);
    reader.sendText(JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'session.hello' }));
    // Each answer is a ~60 KB snapshot; the reader reads none of them. Several MB fit in the
    // kernel's socket buffers first, then the server's own queue grows until the limit.
    for (let i = 1; i <= 1_000; i += 1) {
      reader.sendText(
        JSON.stringify({
          jsonrpc: '2.0',
          id: i,
          method: 'lock.watchPrefix',
          params: { prefix: 'slow/' },
        }),
      );
      if (i % 50 === 0 && (await metric(server, 'slow_reader')) > 0) break;
    }
    let dropped = 0;
    for (let i = 0; i < 100 && dropped === 0; i += 1) {
      dropped = await metric(server, 'slow_reader');
      if (!dropped) await sleep(50);
    }
    expect(dropped).toBe(1);
    const health = (await (await fetch(`${server.httpUrl}/healthz`)).json()) as any;
    expect(health.sessions).toBe(1);
    reader.socket.destroy();
  });
});

describe('HTTP against slowloris', () => {
  /** Opens a TCP connection, runs `act` on it, and resolves with ms until the server closed it. */
  function closedAfter(port: number, act: (socket: Socket) => void): Promise<number> {
    return new Promise((resolve) => {
      const socket = tcpConnect({ port, host: '127.0.0.1' });
      socket.on('error', () => {});
      socket.resume();
      const startedAt = Date.now();
      socket.once('connect', () => act(socket));
      socket.once('close', () => resolve(Date.now() - startedAt));
    });
  }

  it('a request head trickled in slower than headersTimeoutMs is cut off', async () => {
    const server = await serve({ headersTimeoutMs: 300, requestTimeoutMs: 1_000 });
    let timer: NodeJS.Timeout | undefined;
    const ms = await closedAfter(server.port, (socket) => {
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
      timer = setInterval(() => socket.write(`X-Slow-${Date.now()}: 1\r\n`), 50);
    });
    clearInterval(timer);
    expect(ms).toBeLessThan(1_500);
    expect(ms).toBeGreaterThanOrEqual(250);
  });

  it('a request body trickled in slower than requestTimeoutMs is cut off', async () => {
    const server = await serve({ headersTimeoutMs: 200, requestTimeoutMs: 500 });
    let timer: NodeJS.Timeout | undefined;
    const ms = await closedAfter(server.port, (socket) => {
      socket.write('POST /v1/locks HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n');
      timer = setInterval(() => socket.write('x'), 50);
    });
    clearInterval(timer);
    expect(ms).toBeLessThan(2_000);
    expect(ms).toBeGreaterThanOrEqual(400);
  });

  it('a connection that sends nothing is closed too', async () => {
    const server = await serve({ headersTimeoutMs: 300, requestTimeoutMs: 1_000 });
    expect(await closedAfter(server.port, () => {})).toBeLessThan(2_000);
  });
});

describe('limit configuration', () => {
  it('every limit has a flag and an environment variable; defaults fill the rest', () => {
    const config = parseConfig(['--max-inflight', '7', '--message-burst', '9'], {
      DLM_MAX_CONNECTIONS_PER_ADDRESS: '3',
      DLM_HELLO_TIMEOUT_MS: '500',
    });
    expect(config?.limits).toEqual({
      maxInflight: 7,
      messageBurst: 9,
      maxConnectionsPerAddress: 3,
      helloTimeoutMs: 500,
    });
    expect(() => parseConfig(['--max-inflight', '0'], {})).toThrow(/positive integer/);
    expect(() => parseConfig(['--ping-interval-ms', '1.5'], {})).toThrow(/positive integer/);
    expect(() => parseConfig(['--headers-timeout-ms', '60000'], {})).toThrow(/must not exceed/);
    expect(Object.keys(DEFAULT_SERVER_LIMITS)).toHaveLength(13);
  });

  it('the running server reports the limits in force', async () => {
    const server = await serve({ maxInflight: 9 });
    expect(server.limits).toEqual({ ...DEFAULT_SERVER_LIMITS, maxInflight: 9 });
    const peer = await connect(server.url);
    peers.push(peer);
    expect((await peer.hello()).limits.maxInflight).toBe(9);
  });
});
