import { createServer, type Server, type Socket } from 'node:net';
import { startServer } from '@dlm/server';
import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/index.js';
import { eventually, lockName, sleep, useProxiedServer } from './support.js';

const env = useProxiedServer({ requestTimeoutMs: 2_000 });
const { client, viaProxy } = env;

describe('idempotent retries', () => {
  it('an acquire whose reply was lost is re-sent with the same owner and returns that same lease', async () => {
    const a = viaProxy();
    const name = lockName('retry-acquire');
    await a.connect();
    env.proxy.blackhole('replies');
    const acquiring = a.acquire(name, { ttlMs: 5_000 });
    // The server grants it; the reply never arrives; the connection drops.
    await eventually(async () => (await env.backend.inspect(name)) !== null, 2_000);
    const granted = await env.backend.inspect(name);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    const lease = await acquiring;
    // The retry was answered as a re-entry: the one grant, not a second lock.
    expect(lease.token).toBe(granted?.token);
    expect(lease.owner).toBe(granted?.owner);
    // And the lost try's orphan cleanup did not free the lease the retry handed back.
    await sleep(300);
    expect(await env.backend.inspect(name)).toMatchObject({ token: lease.token });
    expect(lease.signal.aborted).toBe(false);
    expect(await lease.release()).toBe(true);
    expect(await env.backend.inspect(name)).toBeNull();
  });

  it('a release whose reply was lost is retried, and the NOT_HOLDER that follows counts as released', async () => {
    const a = viaProxy();
    const name = lockName('retry-release');
    const lease = await a.acquire(name, { ttlMs: 10_000 });
    env.proxy.blackhole('replies');
    const releasing = lease.release();
    await eventually(async () => (await env.backend.inspect(name)) === null, 2_000);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    expect(await releasing).toBe(true);
  });

  it('without retries the same lost release rejects UNAVAILABLE, indeterminate (negative control)', async () => {
    const a = viaProxy();
    const name = lockName('no-retry-release');
    const lease = await a.acquire(name, { ttlMs: 10_000 });
    env.proxy.blackhole('replies');
    const releasing = lease.release({ retry: false });
    releasing.catch(() => {});
    await eventually(async () => (await env.backend.inspect(name)) === null, 2_000);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    await expect(releasing).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      details: { indeterminate: true },
    });
  });

  it('an extend cut off by a dropped connection is retried and keeps the lease', async () => {
    const a = viaProxy();
    const name = lockName('retry-extend');
    const lease = await a.acquire(name, { ttlMs: 3_000 });
    env.proxy.blackhole('replies');
    const extending = lease.extend(6_000);
    await sleep(100);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    await extending;
    expect(lease.ttlMs).toBe(6_000);
    expect(lease.remainingMs()).toBeGreaterThan(5_000);
    expect(await env.backend.inspect(name)).toMatchObject({ token: lease.token });
    await lease.release();
  });
});

describe('what is retried', () => {
  it('LIMIT_EXCEEDED is retried until a slot frees up; with retry: false it is not', async () => {
    const limited = await startServer({ port: 0, backend: env.backend, maxInflight: 1 });
    try {
      const holder = client();
      const name = lockName('limit');
      const held = await holder.acquire(name, { ttlMs: 10_000 });
      const c = client({ url: limited.url });
      // This wait takes the connection's one slot until the holder releases.
      const waiting = c.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
      await sleep(100);
      await expect(c.get(lockName('other'), { retry: false })).rejects.toMatchObject({
        code: 'LIMIT_EXCEEDED',
      });
      const reading = c.get(lockName('other'), {
        retry: { attempts: Number.POSITIVE_INFINITY, maxDelayMs: 100, deadlineMs: 5_000 },
      });
      setTimeout(() => void held.release(), 300);
      expect(await reading).toMatchObject({ held: false });
      await (await waiting).release();
    } finally {
      await limited.close();
    }
  });

  it('LOCK_HELD is not retried unless onLockHeld', async () => {
    const name = lockName('held');
    const held = await client().acquire(name, { ttlMs: 10_000 });
    const c = client();
    await c.connect();
    const started = performance.now();
    await expect(
      c.acquire(name, { ttlMs: 1_000, retry: { attempts: 10, initialDelayMs: 500 } }),
    ).rejects.toMatchObject({ code: 'LOCK_HELD' });
    // One try: a retry would have waited up to 500 ms first.
    expect(performance.now() - started).toBeLessThan(400);
    setTimeout(() => void held.release(), 300);
    const lease = await c.acquire(name, {
      ttlMs: 1_000,
      retry: {
        onLockHeld: true,
        attempts: Number.POSITIVE_INFINITY,
        maxDelayMs: 100,
        deadlineMs: 5_000,
      },
    });
    expect(lease.token).toBeGreaterThan(held.token);
    await lease.release();
  });

  it('the overall deadline bounds the whole operation', async () => {
    const c = await env.clientOfNoServer();
    c.on('error', () => {});
    const started = performance.now();
    await expect(
      c.get('x', {
        retry: { attempts: Number.POSITIVE_INFINITY, deadlineMs: 900, maxDelayMs: 100 },
      }),
    ).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    const elapsed = performance.now() - started;
    // Several 300 ms tries, none started past the deadline.
    expect(elapsed).toBeGreaterThan(600);
    expect(elapsed).toBeLessThan(1_400);
  });

  it('aborting the signal stops retrying at once with CANCELLED', async () => {
    const c = await env.clientOfNoServer();
    c.on('error', () => {});
    const controller = new AbortController();
    const getting = c.get('x', {
      signal: controller.signal,
      retry: { attempts: Number.POSITIVE_INFINITY },
    });
    setTimeout(() => controller.abort(), 500);
    const started = performance.now();
    const error = await getting.catch((e: unknown) => e);
    expect(isDlmError(error, 'CANCELLED')).toBe(true);
    expect(performance.now() - started).toBeLessThan(800);
  });
});

describe('reconnects use the same policy', () => {
  /** Accepts TCP connections and drops them at once, counting them. */
  async function refusingServer(): Promise<{
    port: number;
    count(): number;
    close(): Promise<void>;
  }> {
    let connections = 0;
    const sockets = new Set<Socket>();
    const tcp: Server = createServer((socket) => {
      connections++;
      sockets.add(socket);
      socket.destroy();
    });
    await new Promise<void>((resolve) => tcp.listen(0, '127.0.0.1', resolve));
    const address = tcp.address();
    if (!address || typeof address !== 'object') throw new Error('no port');
    return {
      port: address.port,
      count: () => connections,
      close: () => new Promise((resolve) => tcp.close(() => resolve())),
    };
  }

  it('after `attempts` reconnects the client gives up and waiting requests fail', async () => {
    const target = await refusingServer();
    try {
      const c = client({
        url: `ws://127.0.0.1:${target.port}`,
        requestTimeoutMs: 5_000,
        reconnect: { attempts: 3, initialDelayMs: 10, maxDelayMs: 20 },
      });
      c.on('error', () => {});
      const started = performance.now();
      const error = await c.get('x', { retry: false }).catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: 'UNAVAILABLE',
        message: expect.stringMatching(/gave up reconnecting/),
      });
      // Long before requestTimeoutMs: the policy, not the timeout, ended it.
      expect(performance.now() - started).toBeLessThan(2_000);
      // The first connection, then 3 reconnects.
      expect(target.count()).toBe(4);
    } finally {
      await target.close();
    }
  });
});
