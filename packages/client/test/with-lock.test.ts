import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, type DlmClient, type LockChange } from '../src/index.js';
import { eventually, failOnUnhandledRejections, lockName, sleep, useServer } from './support.js';

failOnUnhandledRejections();

const served = useServer();
let a: DlmClient;
let b: DlmClient;

beforeAll(() => {
  a = createClient({ url: served.server.url });
  b = createClient({ url: served.server.url });
});
afterAll(async () => {
  await a.close();
  await b.close();
});

describe('withLock', () => {
  it('keeps the lease extended past its TTL while fn runs, then releases it', async () => {
    const name = lockName('with-lock');
    let token = 0n;
    // TTLs in these tests leave room for a loaded CI machine's event-loop stalls.
    const value = await a.withLock(name, { ttlMs: 500 }, async (signal, lease) => {
      token = lease.token;
      await sleep(1_600);
      expect(signal.aborted).toBe(false);
      // Another client sees the same lease still held after more than three TTLs.
      expect(await b.get(name)).toMatchObject({ held: true, token: lease.token });
      return 'done';
    });
    expect(value).toBe('done');
    expect(token).toBeGreaterThan(0n);
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it("aborts fn's signal when the lease is lost, and fn's failure is what withLock rejects with", async () => {
    const name = lockName('with-lock-lost');
    const run = a.withLock(name, { ttlMs: 10_000 }, async (signal) => {
      await served.backend.revoke?.(name);
      await new Promise((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    });
    await expect(run).rejects.toMatchObject({ code: 'NOT_HOLDER' });
  });

  it('releases when fn throws', async () => {
    const name = lockName('with-lock-throws');
    await expect(
      a.withLock(name, { ttlMs: 10_000 }, async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it("the caller's signal aborts fn's signal too", async () => {
    const name = lockName('with-lock-signal');
    const controller = new AbortController();
    let sawAbort = false;
    await a.withLock(name, { ttlMs: 10_000, signal: controller.signal }, async (signal) => {
      controller.abort();
      sawAbort = signal.aborted;
    });
    expect(sawAbort).toBe(true);
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });
});

describe('await using', () => {
  it('releases the lease when the block ends', async () => {
    const name = lockName('using');
    let signal: AbortSignal | undefined;
    {
      await using lease = await a.acquire(name, { ttlMs: 10_000 });
      signal = lease.signal;
      expect(await b.get(name)).toMatchObject({ held: true, token: lease.token });
    }
    expect(signal?.aborted).toBe(true);
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });

  it('releases even when the block throws', async () => {
    const name = lockName('using-throws');
    await expect(
      (async () => {
        await using _lease = await a.acquire(name, { ttlMs: 10_000 });
        throw new Error('inside');
      })(),
    ).rejects.toThrow('inside');
    expect(await b.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
  });
});

describe('autoExtend', () => {
  it('an autoExtend lease outlives its TTL until released', async () => {
    const name = lockName('auto-extend');
    const lease = await a.acquire(name, { ttlMs: 500, autoExtend: true });
    await sleep(1_600);
    expect(lease.signal.aborted).toBe(false);
    expect(await b.get(name)).toMatchObject({ held: true, token: lease.token });
    expect(await lease.release()).toBe(true);
  });

  it('extend() moves the local deadline', async () => {
    const name = lockName('extend');
    const lease = await a.acquire(name, { ttlMs: 1_000 });
    await sleep(300);
    await lease.extend(3_000);
    expect(lease.ttlMs).toBe(3_000);
    // Without the move at most ~690 ms would be left.
    expect(lease.remainingMs()).toBeGreaterThan(2_000);
    await sleep(800); // past the first deadline
    expect(lease.signal.aborted).toBe(false);
    await lease.release();
  });
});

describe('watch', () => {
  it('reports the current state, then grants and releases, until stopped', async () => {
    const name = lockName('watch');
    const changes: LockChange[] = [];
    const watch = await b.watch(name, (change) => changes.push(change));
    await eventually(() => changes.length === 1);
    expect(changes[0]).toEqual({ name, held: false });
    const lease = await a.acquire(name, { ttlMs: 10_000 });
    await eventually(() => changes.some((c) => c.held));
    expect(changes.find((c) => c.held)).toMatchObject({ held: true, token: lease.token });
    await lease.release();
    await eventually(() => changes.at(-1)?.held === false && changes.length >= 3);
    await watch.stop();
    const seen = changes.length;
    const again = await a.acquire(name, { ttlMs: 10_000 });
    await sleep(50);
    expect(changes.length).toBe(seen);
    await again.release();
  });
});
