import type { Clock } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { createClient, isDlmError, type Lease } from '../src/index.js';
import { eventually, lockName, sleep, startProxy, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

describe('acquire and release', () => {
  it('acquire grants a lease with a bigint token that get() reports, and release frees it', async () => {
    const a = client();
    const name = lockName('basic');
    const lease = await a.acquire(name, { ttlMs: 5_000 });
    expect(typeof lease.token).toBe('bigint');
    expect(lease.name).toBe(name);
    expect(lease.ttlMs).toBeGreaterThanOrEqual(5_000);
    expect(lease.signal.aborted).toBe(false);
    expect(lease.mode).toBe('exclusive');
    expect(lease.limit).toBeUndefined();
    expect(await a.get(name)).toEqual({
      name,
      held: true,
      owner: lease.owner,
      token: lease.token,
      ttlRemainingMs: expect.any(Number),
      mode: 'exclusive',
      holders: [{ owner: lease.owner, token: lease.token, ttlRemainingMs: expect.any(Number) }],
      waiters: 0,
      waitersScope: 'server',
    });
    expect(await lease.release()).toBe(true);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.lost).toBeUndefined();
    expect(await a.get(name)).toEqual({ name, held: false, waiters: 0, waitersScope: 'server' });
    // A second release reports that the lease had already ended.
    expect(await lease.release()).toBe(false);
  });

  it('connects lazily, sends hello first, and reports the session', async () => {
    const a = client({ name: 'lazy-test' });
    expect(a.session).toBeUndefined();
    const session = await a.connect();
    expect(session).toMatchObject({ protocol: 'dlm.v1', backend: 'embedded' });
    expect(a.session?.sessionId).toBe(session.sessionId);
  });

  it('tryAcquire returns null while another client holds the lock', async () => {
    const [a, b] = [client(), client()];
    const name = lockName('try');
    const held = await a.acquire(name, { ttlMs: 5_000 });
    expect(await b.tryAcquire(name, { ttlMs: 5_000 })).toBeNull();
    await held.release();
    const lease = await b.tryAcquire(name, { ttlMs: 5_000 });
    expect(lease?.token).toBeGreaterThan(held.token);
    await lease?.release();
  });

  it('tryAcquire throws errors other than LOCK_HELD', async () => {
    const a = client();
    await expect(a.tryAcquire('', { ttlMs: 5_000 })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
    });
  });

  it('two concurrent acquire(x) from one client do not both succeed', async () => {
    const a = client();
    const name = lockName('concurrent');
    const results = await Promise.allSettled([
      a.acquire(name, { ttlMs: 5_000 }),
      a.acquire(name, { ttlMs: 5_000 }),
    ]);
    const granted = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r) => r.status === 'rejected');
    expect(granted).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect(isDlmError((refused[0] as PromiseRejectedResult).reason, 'LOCK_HELD')).toBe(true);
    await (granted[0] as PromiseFulfilledResult<Lease>).value.release();
  });

  it('two concurrent waiting acquires from one client hold the lock one after the other', async () => {
    const a = client();
    const name = lockName('concurrent-wait');
    let holders = 0;
    let overlap = false;
    const tokens: bigint[] = [];
    await Promise.all(
      [0, 1].map(async () => {
        const lease = await a.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
        holders++;
        if (holders > 1) overlap = true;
        tokens.push(lease.token);
        await sleep(50);
        holders--;
        await lease.release();
      }),
    );
    expect(overlap).toBe(false);
    expect(new Set(tokens).size).toBe(2);
  });

  it('the same caller-chosen owner re-enters: same token', async () => {
    const a = client();
    const name = lockName('reenter');
    const first = await a.acquire(name, { ttlMs: 5_000, owner: 'me' });
    const second = await a.acquire(name, { ttlMs: 5_000, owner: 'me' });
    expect(second.token).toBe(first.token);
    expect(second.owner).toBe('me');
    await second.release();
    // Both lease objects describe the one server-side lease: releasing it ends the other too
    // as far as the server is concerned.
    expect(await first.release()).toBe(false);
  });
});

describe('waiting', () => {
  it('waiters are served first come, first served', async () => {
    const name = lockName('fifo');
    const holder = await client().acquire(name, { ttlMs: 10_000 });
    const order: string[] = [];
    const waits: Promise<void>[] = [];
    for (const label of ['b', 'c', 'd']) {
      const c = client();
      await c.connect();
      waits.push(
        c.acquire(name, { ttlMs: 10_000, waitMs: 10_000 }).then(async (lease) => {
          order.push(label);
          await sleep(20);
          await lease.release();
        }),
      );
      // Let the request reach the server before the next one is sent.
      await sleep(30);
    }
    await holder.release();
    await Promise.all(waits);
    expect(order).toEqual(['b', 'c', 'd']);
  });

  it('a wait that runs out rejects with LOCK_HELD', async () => {
    const name = lockName('wait-timeout');
    const holder = await client().acquire(name, { ttlMs: 10_000 });
    const started = performance.now();
    await expect(client().acquire(name, { ttlMs: 1_000, waitMs: 200 })).rejects.toMatchObject({
      code: 'LOCK_HELD',
    });
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    await holder.release();
  });

  it('aborting a wait rejects with CANCELLED, and a grant that comes later is released', async () => {
    const name = lockName('abort');
    const holder = await client().acquire(name, { ttlMs: 10_000 });
    const waiter = client();
    const controller = new AbortController();
    const waiting = waiter.acquire(name, {
      ttlMs: 10_000,
      waitMs: 5_000,
      signal: controller.signal,
    });
    await sleep(50);
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ code: 'CANCELLED' });
    // The server still queues the wait (v1 cannot withdraw it): once the holder leaves it is
    // granted to the aborted waiter, whose client gives it back at once instead of letting it
    // block everybody for 10 s.
    await holder.release();
    const other = client();
    await eventually(async () => (await other.get(name)).held === false, 2_000);
    const lease = await other.tryAcquire(name, { ttlMs: 1_000 });
    expect(lease).not.toBeNull();
    await lease?.release();
  });

  it('an already-aborted signal rejects without sending', async () => {
    const controller = new AbortController();
    controller.abort();
    const name = lockName('pre-aborted');
    await expect(
      client().acquire(name, { ttlMs: 1_000, signal: controller.signal }),
    ).rejects.toMatchObject({ code: 'CANCELLED' });
    expect((await client().get(name)).held).toBe(false);
  });

  it('a lease granted after a long wait gets a full local deadline', async () => {
    const name = lockName('wait-anchor');
    const holder = await client().acquire(name, { ttlMs: 10_000 });
    const waiting = client().acquire(name, { ttlMs: 1_000, waitMs: 5_000 });
    await sleep(1_200);
    await holder.release();
    const lease = await waiting;
    // Counted from the acquire's send time the lease would already be over; the client
    // re-anchored it with an extend sent after the grant.
    expect(lease.signal.aborted).toBe(false);
    expect(lease.remainingMs()).toBeGreaterThan(600);
    await lease.release();
  });
});

describe('losing a lease', () => {
  it("lease.signal aborts on the local deadline, before the server's expiry (S6)", async () => {
    // Through a proxy that is then cut client→server, so that the client's own background
    // release cannot reach the server and the server expires the lease by itself: the moment
    // it does (and sends lock.lost) is the backend's `expired` event, in this same process.
    const proxy = await startProxy(env.server.port);
    const a = client({ url: `ws://127.0.0.1:${proxy.port}`, pingIntervalMs: 0 });
    try {
      const name = lockName('deadline');
      let expiredAt = 0;
      const stop = env.backend.watch(name, (event) => {
        if (event.type === 'expired') expiredAt = performance.now();
      });
      const lost: string[] = [];
      a.on('lost', ({ lease, reason }) => {
        if (lease.name === name) lost.push(reason);
      });
      const lease = await a.acquire(name, { ttlMs: 400 });
      let abortedAt = 0;
      lease.signal.addEventListener('abort', () => {
        abortedAt = performance.now();
      });
      proxy.blackhole('requests');
      await eventually(() => expiredAt > 0 && abortedAt > 0, 2_000);
      stop();
      const marginMs = expiredAt - abortedAt;
      console.info(
        `S6: the client gave up its lease ${marginMs.toFixed(1)} ms before the server expired it`,
      );
      expect(marginMs).toBeGreaterThan(0);
      expect(lease.lost).toBe('deadline');
      expect(lost).toEqual(['deadline']);
      expect(lease.signal.reason).toMatchObject({ code: 'NOT_HOLDER' });
      expect(lease.remainingMs()).toBe(0);
      await expect(lease.extend()).rejects.toMatchObject({ code: 'NOT_HOLDER' });
    } finally {
      proxy.blackhole('none');
      await a.close();
      await proxy.close();
    }
  });

  it('after the event loop was blocked past the deadline, every synchronous check says ended at once', async () => {
    const a = client();
    const lost: string[] = [];
    a.on('lost', ({ reason }) => lost.push(reason));
    // A GC pause or a long synchronous loop: no timer can run until it ends.
    const stall = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {}
    };
    // One lease per check, each asked first, in the same turn as the stall: the deadline timer
    // has not run, so only the clock can tell.
    const checks: Array<[string, (lease: Lease) => void]> = [
      ['signal', (lease) => expect(lease.signal.aborted).toBe(true)],
      ['lost', (lease) => expect(lease.lost).toBe('deadline')],
      ['remainingMs', (lease) => expect(lease.remainingMs()).toBe(0)],
      [
        'assertHeld',
        (lease) =>
          expect(() => lease.assertHeld()).toThrow(expect.objectContaining({ code: 'NOT_HOLDER' })),
      ],
    ];
    for (const [label, check] of checks) {
      const lease = await a.acquire(lockName(`stalled-${label}`), { ttlMs: 1_000 });
      expect(lease.remainingMs()).toBeGreaterThan(0);
      expect(() => lease.assertHeld()).not.toThrow();
      stall(1_500);
      check(lease);
      // And then all the others agree.
      expect(lease.signal.aborted).toBe(true);
      expect(lease.signal.reason).toMatchObject({ code: 'NOT_HOLDER' });
      expect(lease.lost).toBe('deadline');
      expect(lease.remainingMs()).toBe(0);
      expect(() => lease.assertHeld()).toThrow(expect.objectContaining({ code: 'NOT_HOLDER' }));
    }
    expect(lost).toEqual(['deadline', 'deadline', 'deadline', 'deadline']);
  });

  it('on its local deadline the client releases the lease, freeing it before its TTL', async () => {
    // A client clock running at double speed puts the local deadline at about half the TTL,
    // so the release reliably beats the server's expiry even on a loaded machine.
    const fastClock: Clock = {
      now: () => performance.now() * 2,
      setTimer: (callback, delayMs) => {
        const handle = setTimeout(callback, Math.max(0, delayMs) / 2);
        return { cancel: () => clearTimeout(handle) };
      },
    };
    const a = client({ clock: fastClock });
    const name = lockName('deadline-release');
    const events: string[] = [];
    const stop = env.backend.watch(name, (event) => events.push(event.type));
    const lease = await a.acquire(name, { ttlMs: 1_000 });
    await eventually(() => lease.signal.aborted, 2_000);
    expect(lease.lost).toBe('deadline');
    await eventually(() => events.includes('released'), 400);
    stop();
    expect(events).not.toContain('expired');
  });

  it('a revoked lease aborts its signal and emits lost (lock.lost from the server)', async () => {
    const a = client();
    const name = lockName('revoke');
    const lost: string[] = [];
    a.on('lost', ({ lease, reason }) => {
      if (lease.name === name) lost.push(reason);
    });
    const lease = await a.acquire(name, { ttlMs: 30_000 });
    const started = performance.now();
    expect(await env.backend.revoke?.(name)).toBe(true);
    await eventually(() => lease.signal.aborted, 2_000);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(lease.lost).toBe('revoked');
    expect(lost).toEqual(['revoked']);
    expect(await lease.release()).toBe(false);
  });

  it("with a local clock running at quarter speed, the server's lock.lost still ends the lease", async () => {
    // The local deadline then falls after the server's expiry: only the notification can
    // tell the client in time.
    const slowClock: Clock = {
      now: () => performance.now() / 4,
      setTimer: (callback, delayMs) => {
        const handle = setTimeout(callback, Math.max(0, delayMs) * 4);
        return { cancel: () => clearTimeout(handle) };
      },
    };
    const a = client({ clock: slowClock });
    const name = lockName('slow-clock');
    const lease = await a.acquire(name, { ttlMs: 300 });
    const started = performance.now();
    await eventually(() => lease.signal.aborted, 2_000);
    expect(lease.lost).toBe('expired');
    // The skewed local deadline would only come after ~1.2 s.
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});

describe('close', () => {
  it('close() releases held leases, ends them, and leaves no timers or sockets behind', async () => {
    const count = () => {
      const counts = new Map<string, number>();
      for (const kind of process.getActiveResourcesInfo()) {
        counts.set(kind, (counts.get(kind) ?? 0) + 1);
      }
      return { timers: counts.get('Timeout') ?? 0, sockets: counts.get('TCPSocketWrap') ?? 0 };
    };
    await sleep(50);
    const before = count();
    const c = createClient({ url: env.server.url });
    const name = lockName('close');
    const lease = await c.acquire(name, { ttlMs: 5_000, autoExtend: true });
    await c.watch(lockName('close-watch'), () => {});
    expect(count().timers).toBeGreaterThan(before.timers);
    await c.close();
    expect(lease.signal.aborted).toBe(true);
    expect(lease.lost).toBeUndefined();
    expect(await env.backend.inspect(name)).toBeNull();
    await expect(c.acquire(name, { ttlMs: 1_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
    await sleep(50);
    const after = count();
    expect(after.timers).toBeLessThanOrEqual(before.timers);
    expect(after.sockets).toBeLessThanOrEqual(before.sockets);
  });
});
