import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import NodeWebSocket from 'ws';
import { createClient, type DlmClient, isDlmError } from '../src/index.js';
import { failOnUnhandledRejections, lockName, sleep, unusedPort } from './support.js';

// What a new user meets first: a server that is not there, a wrong URL, a bad argument, one
// client shared by many callers. Real servers: the built server as its own process for the
// default-limits run, in-process ones elsewhere.
failOnUnhandledRejections();

const SERVER_MAIN = fileURLToPath(new URL('../../../apps/server/dist/main.js', import.meta.url));

let server: RunningServer;
const clients: DlmClient[] = [];
beforeAll(async () => {
  server = await startServer({ port: 0 });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await server.close();
});

function client(options: Parameters<typeof createClient>[0]): DlmClient {
  const c = createClient(options);
  c.on('error', () => {});
  clients.push(c);
  return c;
}

/** The error a one-try request on a fresh client gets. */
async function firstFailure(url: string): Promise<Error & { code?: string; cause?: unknown }> {
  const c = client({ url, requestTimeoutMs: 1_500, retry: false, reconnect: false });
  return (await c.get('x').catch((error: unknown) => error)) as Error & { code?: string };
}

describe('a connection that cannot be made says why', () => {
  it('connection refused, with the socket error as cause', async () => {
    const port = await unusedPort();
    const started = performance.now();
    const error = await firstFailure(`ws://127.0.0.1:${port}`);
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(/connection refused/);
    expect((error.cause as { code?: string }).code).toBe('ECONNREFUSED');
    // With reconnect off it fails with the first refusal, not at the request time-out.
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('host not found', async () => {
    const error = await firstFailure('ws://no-such-host.invalid:7070');
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(/host not found/);
    expect((error.cause as { code?: string }).code).toMatch(/ENOTFOUND|EAI_AGAIN/);
  });

  it('a wrong path is HTTP 404 on the upgrade', async () => {
    const error = await firstFailure(`ws://127.0.0.1:${server.port}/v2/ws`);
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(/HTTP 404 on the WebSocket upgrade/);
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('wss:// to a server without TLS is a TLS error', async () => {
    const error = await firstFailure(`wss://127.0.0.1:${server.port}`);
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(/TLS error/);
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('with reconnects on, the request that times out still names the last failure', async () => {
    const port = await unusedPort();
    const c = client({ url: `ws://127.0.0.1:${port}`, requestTimeoutMs: 600, retry: false });
    const error = (await c.get('x').catch((e: unknown) => e)) as Error & { cause?: unknown };
    expect(error.message).toMatch(/no session with .* within 600 ms: connection refused/);
    expect((error.cause as { code?: string }).code).toBe('ECONNREFUSED');
  });

  it('a URL without a scheme, or with another one, is INVALID_PARAMS from createClient', () => {
    for (const url of ['localhost:7171', '127.0.0.1:7171', 'ftp://127.0.0.1:7171', 'nonsense']) {
      let thrown: unknown;
      try {
        createClient({ url });
      } catch (error) {
        thrown = error;
      }
      expect(isDlmError(thrown, 'INVALID_PARAMS'), url).toBe(true);
      expect((thrown as { details: { field?: string } }).details.field).toBe('url');
    }
    expect(() => createClient({ url: 'localhost:7171' })).toThrow(
      /did you mean ws:\/\/localhost:7171/,
    );
  });
});

describe('inputs are checked before anything is sent, as the server checks them', () => {
  /** What the server answers a raw lock.acquire with these params. */
  async function serverError(params: Record<string, unknown>) {
    const ws = new NodeWebSocket(server.url, 'dlm.v1.json');
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const replies: Array<Record<string, any>> = [];
    ws.on('message', (data) => replies.push(JSON.parse(String(data))));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'session.hello', params: {} }));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'lock.acquire', params }));
    while (replies.length < 2) await sleep(5);
    ws.close();
    return replies[1]!.error as { message: string; data: { code: string; field?: string } };
  }

  const cases: Array<[string, Record<string, unknown>]> = [
    ['waitMs -1', { name: 'v', ttlMs: 1_000, waitMs: -1 }],
    ['ttlMs 50', { name: 'v', ttlMs: 50 }],
    ['ttlMs 1.5', { name: 'v', ttlMs: 1.5 }],
    ['ttlMs over 24 h', { name: 'v', ttlMs: 86_400_001 }],
    ['waitMs over 5 min', { name: 'v', ttlMs: 1_000, waitMs: 300_001 }],
    ['an empty name', { name: '', ttlMs: 1_000 }],
    ['a control character', { name: 'a\nb', ttlMs: 1_000 }],
    ['an empty owner', { name: 'v', ttlMs: 1_000, owner: '' }],
  ];

  for (const [what, params] of cases) {
    it(`${what}: the same code, field and message as the server's, without connecting`, async () => {
      const expected = await serverError(params);
      let opened = 0;
      const Counting = class extends NodeWebSocket {
        constructor(url: string, protocols?: string | string[]) {
          super(url, protocols);
          opened += 1;
        }
      };
      const c = client({
        url: server.url,
        WebSocket: Counting as unknown as NonNullable<
          Parameters<typeof createClient>[0]['WebSocket']
        >,
      });
      const { name, ...options } = params as { name: string; ttlMs: number };
      const error = (await c.acquire(name, options).catch((e: unknown) => e)) as {
        code: string;
        message: string;
        details: { field?: string };
      };
      expect(error.code).toBe(expected.data.code);
      expect(error.details.field).toBe(expected.data.field);
      expect(error.message).toBe(expected.message);
      expect(opened).toBe(0);
    });
  }

  it('lease.extend(50) is refused before it is sent; the lease is still held', async () => {
    const c = client({ url: server.url });
    const lease = await c.acquire(lockName('extend'), { ttlMs: 5_000 });
    await expect(lease.extend(50)).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      details: { field: 'ttlMs' },
    });
    expect(lease.signal.aborted).toBe(false);
    await lease.release();
  });
});

describe('one client shared by many callers', () => {
  let proc: ChildProcess | undefined;
  afterAll(() => {
    proc?.kill('SIGKILL');
  });

  it('32 concurrent callers acquiring and releasing for 10 s against a default server get no error', async () => {
    if (!existsSync(SERVER_MAIN)) throw new Error(`${SERVER_MAIN} is missing: build first`);
    const port = await unusedPort();
    // The server as users start it, flags for nothing but the port and the log: default limits.
    proc = spawn(
      process.execPath,
      [SERVER_MAIN, '--memory', '--port', String(port), '--log-level', 'warn'],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    for (let tries = 0; ; tries += 1) {
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) break;
      if (tries > 200) throw new Error('the server did not start');
      await sleep(50);
    }
    const c = client({ url: `ws://127.0.0.1:${port}` });
    const errors: unknown[] = [];
    let pairs = 0;
    const until = performance.now() + 10_000;
    await Promise.all(
      Array.from({ length: 32 }, async (_, caller) => {
        const name = `shared/${caller % 8}`;
        while (performance.now() < until) {
          try {
            const lease = await c.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
            await lease.release();
            pairs += 1;
          } catch (error) {
            errors.push(error);
            if (errors.length > 10) return;
          }
        }
      }),
    );
    console.log(`[shared client] ${pairs} acquire/release pairs in 10 s, ${errors.length} errors`);
    expect(errors).toEqual([]);
    expect(pairs).toBeGreaterThan(1_000);
  }, 30_000);

  it('a retryable LIMIT_EXCEEDED is backed off and retried under the retry policy', async () => {
    const limited = await startServer({
      port: 0,
      limits: { messagesPerSecond: 200, messageBurst: 50 },
    });
    try {
      // Control: with one try, the rate limit reaches the callers.
      const once = client({ url: limited.url, retry: false });
      const refused = await Promise.allSettled(
        Array.from({ length: 120 }, (_, i) => once.get(lockName(`once-${i}`))),
      );
      expect(
        refused.some((r) => r.status === 'rejected' && isDlmError(r.reason, 'LIMIT_EXCEEDED')),
      ).toBe(true);
      await once.close();
      await sleep(1_000);

      const patient = client({
        url: limited.url,
        retry: { attempts: Number.POSITIVE_INFINITY, deadlineMs: 20_000, maxDelayMs: 1_000 },
      });
      const errors: unknown[] = [];
      let pairs = 0;
      await Promise.all(
        Array.from({ length: 16 }, async (_, caller) => {
          for (let i = 0; i < 20; i += 1) {
            try {
              const lease = await patient.acquire(lockName(`patient-${caller}`), { ttlMs: 5_000 });
              await lease.release();
              pairs += 1;
            } catch (error) {
              errors.push(error);
            }
          }
        }),
      );
      expect(errors).toEqual([]);
      expect(pairs).toBe(320);
      const metrics = await (await fetch(`${limited.httpUrl}/metrics`)).text();
      // It was limited, and got through by retrying.
      expect(metrics).toMatch(
        /dlm_requests_total\{method="lock\.acquire",code="LIMIT_EXCEEDED"\} [1-9]/,
      );
    } finally {
      await limited.close();
    }
  }, 60_000);
});
