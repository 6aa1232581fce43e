import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, describe, expect, it } from 'vitest';
import { createClient, type DlmClient, type LockChange } from '../src/index.js';
import {
  eventually,
  failOnUnhandledRejections,
  fastReconnect,
  lockName,
  sleep,
  useProxiedServer,
  useServer,
} from './support.js';

failOnUnhandledRejections();

describe('server restart on the same port, backend kept', () => {
  // The first server (closed by the test) and the backend it shares with the second.
  const served = useServer();
  let second: RunningServer | undefined;
  let client: DlmClient;
  let observer: DlmClient;

  afterAll(async () => {
    await client?.close();
    await observer?.close();
    await second?.close();
  });

  it('reconnects, and held leases stay extendable, auto-extended and watched', async () => {
    const { backend, server: first } = served;
    client = createClient({ url: first.url, reconnect: fastReconnect });
    const events: string[] = [];
    client.on('connected', ({ reconnected }) =>
      events.push(reconnected ? 'reconnected' : 'connected'),
    );
    client.on('disconnected', ({ willReconnect }) => events.push(`disconnected:${willReconnect}`));
    const lost: string[] = [];
    client.on('lost', ({ lease, reason }) => lost.push(`${lease.name}:${reason}`));

    const plainName = lockName('restart-plain');
    const autoName = lockName('restart-auto');
    const watchedName = lockName('restart-watched');
    const plain = await client.acquire(plainName, { ttlMs: 3_000 });
    const auto = await client.acquire(autoName, { ttlMs: 1_000, autoExtend: true });
    const changes: LockChange[] = [];
    await client.watch(watchedName, (change) => changes.push(change));
    // Sent before the restart, and the server ends it as it shuts down. (Not retried, so the
    // test sees what a dropped wait looks like; retries are retry.test.ts's subject.)
    const pendingWait = client.acquire(plainName, { ttlMs: 1_000, waitMs: 10_000, retry: false });
    pendingWait.catch(() => {});

    await first.close();
    await expect(pendingWait).rejects.toMatchObject({
      code: expect.stringMatching(/CANCELLED|UNAVAILABLE/),
    });
    await eventually(() => events.includes('disconnected:true'));
    // Closing a server must not close a backend it was handed.
    expect(await backend.inspect(plainName)).toMatchObject({ token: plain.token });

    // Down for a while, but well within the auto-extended lease's TTL so it survives.
    await sleep(150);
    second = await startServer({ port: first.port, backend });
    await eventually(() => events.includes('reconnected'), 3_000);
    expect(events).toEqual(['connected', 'disconnected:true', 'reconnected']);

    // The plain lease is still ours: the new session extends and releases it by token.
    expect(plain.signal.aborted).toBe(false);
    await plain.extend(3_000);
    expect(plain.remainingMs()).toBeGreaterThan(2_500);

    // The auto-extended lease keeps being extended through the new session.
    await sleep(1_200);
    expect(auto.signal.aborted).toBe(false);
    expect(await backend.inspect(autoName)).toMatchObject({ token: auto.token });

    // The watch was set up again on the new session.
    const before = changes.length;
    observer = createClient({ url: second.url });
    const other = await observer.acquire(watchedName, { ttlMs: 5_000 });
    await eventually(() => changes.slice(before).some((c) => c.held && c.token === other.token));
    await other.release();

    expect(await plain.release()).toBe(true);
    expect(await auto.release()).toBe(true);
    expect(lost).toEqual([]);
  });
});

describe('network faults', () => {
  const env = useProxiedServer();
  const viaProxy = (): DlmClient => env.viaProxy({ requestTimeoutMs: 1_000 });

  it('requests in flight when the connection drops reject UNAVAILABLE; writes are indeterminate', async () => {
    const a = viaProxy();
    const holderName = lockName('drop-held');
    const direct = env.client();
    const holder = await direct.acquire(holderName, { ttlMs: 5_000 });
    await a.connect();
    const waiting = a.acquire(holderName, { ttlMs: 1_000, waitMs: 5_000, retry: false });
    const reading = a.get(lockName('drop-get'), { retry: false });
    env.proxy.blackhole('replies');
    await sleep(50);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    await expect(waiting).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      details: { indeterminate: true },
    });
    const readError = await reading.catch((error: unknown) => error);
    // The get may have been answered before the blackhole; if not, it is not indeterminate.
    if (readError instanceof Error) {
      expect(readError).toMatchObject({ code: 'UNAVAILABLE', details: {} });
    }
    await holder.release();
  });

  it('an acquire whose reply was lost (and not retried) is found and released after reconnecting', async () => {
    const a = viaProxy();
    const name = lockName('orphan');
    await a.connect();
    env.proxy.blackhole('replies');
    const acquiring = a.acquire(name, { ttlMs: 30_000, retry: false });
    acquiring.catch(() => {});
    // The server grants it, but the reply never arrives.
    await eventually(async () => (await env.backend.inspect(name)) !== null, 2_000);
    env.proxy.dropConnections();
    env.proxy.blackhole('none');
    await expect(acquiring).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      details: { indeterminate: true },
    });
    // Without the cleanup it would stay held for 30 s.
    await eventually(async () => (await env.backend.inspect(name)) === null, 3_000);
  });

  it('a request with no reply times out with UNAVAILABLE within requestTimeoutMs', async () => {
    const a = viaProxy();
    await a.connect();
    env.proxy.blackhole('replies');
    const started = performance.now();
    await expect(
      a.acquire(lockName('timeout'), { ttlMs: 30_000, retry: false }),
    ).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      details: { indeterminate: true },
    });
    const elapsed = performance.now() - started;
    env.proxy.blackhole('none');
    expect(elapsed).toBeGreaterThanOrEqual(950);
    expect(elapsed).toBeLessThan(1_500);
  });

  it('with no server at all, a request fails with UNAVAILABLE within requestTimeoutMs', async () => {
    const c = await env.clientOfNoServer();
    const errors: Error[] = [];
    c.on('error', (error) => errors.push(error));
    const started = performance.now();
    await expect(c.get('x', { retry: false })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(performance.now() - started).toBeLessThan(600);
    expect(errors.length).toBeGreaterThan(0);
  });

  it('an auto-extended lease whose connection is cut is lost locally before the server expires it', async () => {
    const a = viaProxy();
    const name = lockName('cut');
    let expiredAt = 0;
    const stop = env.backend.watch(name, (event) => {
      if (event.type === 'expired') expiredAt = performance.now();
    });
    const lease = await a.acquire(name, { ttlMs: 500, autoExtend: true });
    let abortedAt = 0;
    lease.signal.addEventListener('abort', () => {
      abortedAt = performance.now();
    });
    // Requests (extends) stop reaching the server; the connection itself looks open.
    env.proxy.blackhole('requests');
    await eventually(() => expiredAt > 0 && abortedAt > 0, 3_000);
    env.proxy.blackhole('none');
    env.proxy.dropConnections();
    stop();
    expect(lease.lost).toBe('deadline');
    expect(abortedAt).toBeLessThan(expiredAt);
  });
});
