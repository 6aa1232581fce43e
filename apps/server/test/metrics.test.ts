import { breakable, startRedis } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The value of one series in Prometheus text, or undefined when it is absent. */
function sample(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) {
      return Number(match[4]);
    }
  }
  return undefined;
}

async function scrape(server: RunningServer): Promise<string> {
  const response = await fetch(`${server.httpUrl}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return response.text();
}

let server: RunningServer;
beforeAll(async () => {
  server = await startServer({ port: 0 });
});
afterAll(async () => {
  await server.close();
});

/** Closes peers and waits until the server has seen them go, so gauges are settled. */
async function end(...peers: Peer[]): Promise<void> {
  for (const peer of peers) peer.close();
  await Promise.all(peers.map((peer) => peer.closed));
  await sleep(20);
}

const session = (url = server.url): Promise<Peer> => openSession(url);

describe('GET /metrics', () => {
  it('exposes every dlm metric and the Node process metrics', async () => {
    const text = await scrape(server);
    for (const name of [
      'dlm_build_info',
      'dlm_requests_total',
      'dlm_request_duration_seconds',
      'dlm_lock_wait_seconds',
      'dlm_lock_hold_seconds',
      'dlm_locks_held',
      'dlm_lock_waiters',
      'dlm_sessions',
      'dlm_locks_lost_total',
      'dlm_lock_delay_refusals_total',
      'dlm_backend_errors_total',
      'dlm_backend_duration_seconds',
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
    ]) {
      expect(text, name).toContain(`# TYPE ${name} `);
    }
    expect(sample(text, 'dlm_build_info', { backend: 'embedded' })).toBe(1);
  });

  it('counts requests by method and code, and times acquire, release, extend and the backend', async () => {
    const before = await scrape(server);
    const count = (text: string, method: string, code: string) =>
      sample(text, 'dlm_requests_total', { method, code }) ?? 0;
    const holder = await session();
    const other = await session();
    const lease = (await holder.call('lock.acquire', { name: 'm/a', ttlMs: 5_000 })).result;
    await other.call('lock.acquire', { name: 'm/a', ttlMs: 5_000 });
    await holder.call('lock.extend', { name: 'm/a', token: lease.token, ttlMs: 5_000 });
    await holder.call('lock.release', { name: 'm/a', token: lease.token });
    await holder.call('lock.release', { name: 'm/a', token: lease.token });
    await holder.call('no.such.method', {});
    const after = await scrape(server);

    expect(count(after, 'lock.acquire', 'OK') - count(before, 'lock.acquire', 'OK')).toBe(1);
    expect(
      count(after, 'lock.acquire', 'LOCK_HELD') - count(before, 'lock.acquire', 'LOCK_HELD'),
    ).toBe(1);
    expect(count(after, 'lock.extend', 'OK') - count(before, 'lock.extend', 'OK')).toBe(1);
    expect(count(after, 'lock.release', 'OK') - count(before, 'lock.release', 'OK')).toBe(1);
    expect(
      count(after, 'lock.release', 'NOT_HOLDER') - count(before, 'lock.release', 'NOT_HOLDER'),
    ).toBe(1);
    expect(
      count(after, 'invalid', 'METHOD_NOT_FOUND') - count(before, 'invalid', 'METHOD_NOT_FOUND'),
    ).toBe(1);
    // The client's method name never becomes a label value.
    expect(after).not.toContain('no.such.method');

    const observed = (text: string, method: string) =>
      sample(text, 'dlm_request_duration_seconds_count', { method }) ?? 0;
    expect(observed(after, 'lock.acquire') - observed(before, 'lock.acquire')).toBe(2);
    expect(observed(after, 'lock.extend') - observed(before, 'lock.extend')).toBe(1);
    expect(observed(after, 'lock.release') - observed(before, 'lock.release')).toBe(2);
    const backendCalls = (text: string, operation: string) =>
      sample(text, 'dlm_backend_duration_seconds_count', { operation }) ?? 0;
    expect(backendCalls(after, 'tryAcquire') - backendCalls(before, 'tryAcquire')).toBe(2);
    expect(backendCalls(after, 'extend') - backendCalls(before, 'extend')).toBe(1);

    const held = (text: string, end: string) =>
      sample(text, 'dlm_lock_hold_seconds_count', { end }) ?? 0;
    expect(held(after, 'released') - held(before, 'released')).toBe(1);
    await end(holder, other);
  });

  it('gauges follow sessions, held locks and waiters', async () => {
    const base = await scrape(server);
    const sessions0 = sample(base, 'dlm_sessions')!;
    const held0 = sample(base, 'dlm_locks_held')!;
    const holder = await session();
    const waiter = await session();
    const lease = (await holder.call('lock.acquire', { name: 'g/a', ttlMs: 10_000 })).result;
    const waiting = waiter.call('lock.acquire', { name: 'g/a', ttlMs: 1_000, waitMs: 10_000 });
    await sleep(50);

    const during = await scrape(server);
    expect(sample(during, 'dlm_sessions')).toBe(sessions0 + 2);
    expect(sample(during, 'dlm_locks_held')).toBe(held0 + 1);
    expect(sample(during, 'dlm_lock_waiters')).toBe(1);

    await holder.call('lock.release', { name: 'g/a', token: lease.token });
    const granted = (await waiting).result;
    const handedOver = await scrape(server);
    expect(sample(handedOver, 'dlm_lock_waiters')).toBe(0);
    expect(sample(handedOver, 'dlm_locks_held')).toBe(held0 + 1);
    const waited = sample(handedOver, 'dlm_lock_wait_seconds_count', { outcome: 'granted' })!;
    expect(waited).toBeGreaterThanOrEqual(1);

    await waiter.call('lock.release', { name: 'g/a', token: granted.token });
    await end(holder, waiter);
    const after = await scrape(server);
    expect(sample(after, 'dlm_sessions')).toBe(sessions0);
    expect(sample(after, 'dlm_locks_held')).toBe(held0);
  });

  it('counts lost locks by reason and wait timeouts', async () => {
    const before = await scrape(server);
    const lost = (text: string, reason: string) =>
      sample(text, 'dlm_locks_lost_total', { reason }) ?? 0;
    const peer = await session();
    const other = await session();
    await peer.call('lock.acquire', { name: 'lost/expires', ttlMs: 150 });
    await other.call('lock.acquire', { name: 'lost/expires', ttlMs: 1_000, waitMs: 50 });
    await peer.nextNotification('lock.lost');
    await peer.call('lock.acquire', { name: 'lost/revoked', ttlMs: 10_000 });
    await fetch(`${server.httpUrl}/v1/locks/lost%2Frevoked`, { method: 'DELETE' });
    await peer.nextNotification('lock.lost');
    const after = await scrape(server);
    expect(lost(after, 'expired') - lost(before, 'expired')).toBe(1);
    expect(lost(after, 'revoked') - lost(before, 'revoked')).toBe(1);
    const timeouts = (text: string) =>
      sample(text, 'dlm_lock_wait_seconds_count', { outcome: 'timeout' }) ?? 0;
    expect(timeouts(after) - timeouts(before)).toBe(1);
    const ended = (text: string, end: string) =>
      sample(text, 'dlm_lock_hold_seconds_count', { end }) ?? 0;
    expect(ended(after, 'expired') - ended(before, 'expired')).toBe(1);
    expect(ended(after, 'revoked') - ended(before, 'revoked')).toBe(1);
    await end(peer, other);
  });
});

describe('lock-delay refusals', () => {
  it('counts acquires refused because the name is in its lock-delay, and no other refusal', async () => {
    const refusals = (text: string) => sample(text, 'dlm_lock_delay_refusals_total') ?? 0;
    const before = await scrape(server);
    const peer = await session();
    const other = await session();
    await peer.call('lock.acquire', { name: 'delayed/held', ttlMs: 10_000 });
    await other.call('lock.acquire', { name: 'delayed/held', ttlMs: 1_000 }).catch(() => {});
    expect(refusals(await scrape(server)) - refusals(before)).toBe(0);
    await peer.call('lock.acquire', { name: 'delayed/x', ttlMs: 150, lockDelayMs: 5_000 });
    await peer.nextNotification('lock.lost');
    await other.call('lock.acquire', { name: 'delayed/x', ttlMs: 1_000 }).catch(() => {});
    expect(refusals(await scrape(server)) - refusals(before)).toBe(1);
    await end(peer, other);
  });
});

describe('leases ended at their cap on holding', () => {
  it('counts a lease that reaches its maxHoldMs, and not one that just expires', async () => {
    const capped = (text: string) => sample(text, 'dlm_leases_max_hold_total') ?? 0;
    const lost = (text: string) => sample(text, 'dlm_locks_lost_total', { reason: 'maxHold' }) ?? 0;
    const before = await scrape(server);
    const peer = await session();
    await peer.call('lock.acquire', { name: 'capped/free', ttlMs: 150, maxHoldMs: 5_000 });
    expect((await peer.nextNotification('lock.lost')).params.reason).toBe('expired');
    const grant = await peer.call('lock.acquire', { name: 'capped/x', ttlMs: 150, maxHoldMs: 400 });
    const { token } = grant.result;
    const extended = await peer.call('lock.extend', { name: 'capped/x', token, ttlMs: 5_000 });
    expect(extended.result.ttlMs).toBeLessThanOrEqual(400);
    expect((await peer.nextNotification('lock.lost')).params.reason).toBe('maxHold');
    const after = await scrape(server);
    expect(capped(after) - capped(before)).toBe(1);
    expect(lost(after) - lost(before)).toBe(1);
    await end(peer);
  });
});

describe.runIf(breakable('redis'))('a backend that goes away', () => {
  it('counts backend errors and logs one line when it goes and one when it is back', async () => {
    const redis = await startRedis();
    const lines: Array<Record<string, unknown>> = [];
    const onRedis = await startServer({
      port: 0,
      backendConfig: { kind: 'redis', url: redis.url },
      logger: createLogger('info', (line) => lines.push(JSON.parse(line))),
    });
    try {
      const peer = await session(onRedis.url);
      expect((await peer.call('lock.acquire', { name: 'r/a', ttlMs: 5_000 })).result).toBeDefined();
      await redis.kill();
      for (let i = 0; i < 2; i += 1) {
        const reply = await peer.call('lock.acquire', { name: `r/down-${i}`, ttlMs: 5_000 });
        expect(reply.error.data.code).toBe('UNAVAILABLE');
      }
      const text = await scrape(onRedis);
      expect(sample(text, 'dlm_backend_errors_total', { operation: 'tryAcquire' })).toBe(2);
      expect(
        sample(text, 'dlm_requests_total', { method: 'lock.acquire', code: 'UNAVAILABLE' }),
      ).toBe(2);
      // One line for the outage, not one per failed call.
      expect(lines.filter((line) => line.msg === 'backend unavailable')).toHaveLength(1);

      await redis.start();
      const deadline = Date.now() + 15_000;
      for (;;) {
        const reply = await peer.call('lock.acquire', { name: 'r/back', ttlMs: 5_000 });
        if (reply.result) break;
        if (Date.now() > deadline) throw new Error('redis did not come back');
        await sleep(200);
      }
      expect(lines.filter((line) => line.msg === 'backend connected again')).toHaveLength(1);
      expect(lines.find((line) => line.msg === 'backend connected')).toMatchObject({
        backend: 'redis',
      });
      peer.close();
    } finally {
      await onRedis.close();
      await redis.kill().catch(() => {});
    }
  }, 60_000);
});
