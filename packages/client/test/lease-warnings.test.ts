import { describe, expect, it } from 'vitest';
import type { DlmClient, Lease } from '../src/index.js';
import { eventually, lockName, sleep, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

/** A GC pause or a long synchronous loop: no timer can run until it ends. */
function stall(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {}
}

describe('a signal taken before a stall', () => {
  it('reads aborted after a stall past the deadline, though no timer ran (aborted, reason, throwIfAborted)', async () => {
    const a = client();
    const reads: Array<[string, (signal: AbortSignal) => void]> = [
      ['aborted', (signal) => expect(signal.aborted).toBe(true)],
      ['reason', (signal) => expect(signal.reason).toMatchObject({ code: 'NOT_HOLDER' })],
      [
        'throwIfAborted',
        (signal) =>
          expect(() => signal.throwIfAborted()).toThrow(
            expect.objectContaining({ code: 'NOT_HOLDER' }),
          ),
      ],
    ];
    for (const [label, read] of reads) {
      const lease = await a.acquire(lockName(`signal-${label}`), { ttlMs: 1_000 });
      // Taken once, before the stall, and kept: the way work hands a signal on.
      const { signal } = lease;
      expect(signal.aborted).toBe(false);
      let told = 0;
      signal.addEventListener('abort', () => {
        told += 1;
      });
      stall(1_500);
      // The first look after the stall, in the same turn: only the clock can know.
      read(signal);
      expect(signal.aborted).toBe(true);
      // Its listeners heard it then, once, and the lease agrees.
      expect(told).toBe(1);
      expect(lease.lost).toBe('deadline');
    }
  });

  it("withLock's signal (joined with the caller's) and a lease group's read aborted after the stall too", async () => {
    const a = client();
    const caller = new AbortController();
    const seen = await a.withLock(
      lockName('signal-with-lock'),
      { ttlMs: 1_000, signal: caller.signal },
      async (signal) => {
        expect(signal.aborted).toBe(false);
        stall(1_500);
        return signal.aborted;
      },
    );
    expect(seen).toBe(true);

    const group = await a.acquireAll([lockName('signal-group-a'), lockName('signal-group-b')], {
      ttlMs: 1_000,
    });
    const { signal } = group;
    expect(signal.aborted).toBe(false);
    stall(1_500);
    expect(signal.aborted).toBe(true);
  });

  it('a signal read while the lease is held says so, and a released one says aborted', async () => {
    const a = client();
    const lease = await a.acquire(lockName('signal-held'), { ttlMs: 5_000 });
    const { signal } = lease;
    stall(200);
    expect(signal.aborted).toBe(false);
    expect(() => signal.throwIfAborted()).not.toThrow();
    await lease.release();
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toMatchObject({ code: 'CANCELLED' });
  });
});

/** Every `expiring` a lease and its client tell, with when it came. */
function expiringOf(a: DlmClient, lease: Lease) {
  const told: Array<{ remainingMs: number; at: number }> = [];
  const byClient: Lease[] = [];
  lease.on('expiring', ({ remainingMs }) => told.push({ remainingMs, at: performance.now() }));
  a.on('expiring', (event) => byClient.push(event.lease));
  return { told, byClient };
}

describe('expiring', () => {
  it('is told once, below a third of the TTL left, while extends fail; then the lease is lost', async () => {
    const a = env.viaProxy({ requestTimeoutMs: 150 });
    const ttlMs = 1_500;
    const sentAt = performance.now();
    const lease = await a.acquire(lockName('expiring'), { ttlMs, autoExtend: true });
    const { told, byClient } = expiringOf(a, lease);
    let lostAt = 0;
    lease.signal.addEventListener('abort', () => {
      lostAt = performance.now();
    });
    // Every extend from now on goes unanswered (the auto-extend comes at a third of the TTL).
    env.proxy.blackhole('requests');
    try {
      await eventually(() => lostAt > 0, 4_000);
    } finally {
      env.proxy.blackhole('none');
    }
    expect(told).toHaveLength(1);
    const [warning] = told;
    expect(warning!.remainingMs).toBeGreaterThan(0);
    expect(warning!.remainingMs).toBeLessThanOrEqual(ttlMs / 3);
    // Not before a third of the TTL was left (counted from the acquire's send, as the deadline).
    expect(warning!.at - sentAt).toBeGreaterThanOrEqual((2 * ttlMs) / 3 - 20);
    expect(warning!.at).toBeLessThan(lostAt);
    expect(byClient).toEqual([lease]);
    expect(lease.lost).toBe('deadline');
  });

  it('is not told while extends succeed, nor for a lease nobody extends', async () => {
    const a = client();
    const kept = await a.acquire(lockName('expiring-kept'), { ttlMs: 600, autoExtend: true });
    const keptTold = expiringOf(a, kept).told;
    const plain = await a.acquire(lockName('expiring-plain'), { ttlMs: 600 });
    const plainTold: number[] = [];
    plain.on('expiring', ({ remainingMs }) => plainTold.push(remainingMs));
    await sleep(1_500);
    expect(kept.lost).toBeUndefined();
    expect(keptTold).toEqual([]);
    expect(plain.lost).toBe('deadline');
    expect(plainTold).toEqual([]);
    await kept.release();
  });

  it('a listener removed is not told, and one that throws is reported, not raised', async () => {
    const a = client();
    const lease = await a.acquire(lockName('expiring-off'), { ttlMs: 5_000 });
    const remove = lease.on('expiring', () => {
      throw new Error('not removed');
    });
    remove();
    expect(() => lease.on('lost' as 'expiring', () => {})).toThrow(
      expect.objectContaining({ code: 'INVALID_PARAMS' }),
    );
    await lease.release();
  });
});
