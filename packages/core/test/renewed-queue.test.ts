import { describe, expect, it } from 'vitest';
import { createManualClock } from '../src/clock.js';
import type { QueueStep } from '../src/fair-queue.js';
import {
  createRenewedFairQueue,
  type QueueEntry,
  type RenewedFairQueueOptions,
} from '../src/renewed-queue.js';

// The real queues are covered against PostgreSQL and Redis (adapter tests and conformance).
// These cover what the shared lifecycle promises whatever the backend: close waits for the waits
// still running, entries are renewed while queued and only then, and the timer at the end of an
// entry ahead.

/** A promise with its resolve, to hold a driver call until the test lets it go. */
function gate<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));
const request = (signal: AbortSignal, name = 'x') => ({ name, owner: 'o', ttlMs: 1_000, signal });

/**
 * A queue whose waiters each join as the next id of `ids` and then do what `join` says; a look
 * sleeps on the holder (no lease: until woken). Every call is logged, every renewal recorded.
 */
function testQueue(
  join: (entry: QueueEntry) => Promise<QueueStep> | QueueStep,
  overrides: Partial<RenewedFairQueueOptions> = {},
) {
  const clock = createManualClock();
  const log: string[] = [];
  const renewals: [string, string[]][][] = [];
  const entries: QueueEntry[] = [];
  let closed = false;
  let next = 0;
  const queue = createRenewedFairQueue({
    clock,
    backend: 'test',
    isClosed: () => closed,
    expirySlackMs: 50,
    aheadSlackMs: 10,
    waiterTtlMs: 300,
    async renew(byName) {
      renewals.push([...byName].map(([name, ids]) => [name, [...ids]]));
    },
    driver: (_request, _watcher, entry) => {
      entries.push(entry);
      return {
        async join() {
          log.push('join');
          next += 1;
          entry.set(String(next));
          return join(entry);
        },
        async look() {
          log.push('look');
          return { kind: 'holder' };
        },
        stop: () => log.push('stop'),
        async leave() {
          log.push(`leave ${entry.take()}`);
        },
      };
    },
    ...overrides,
  });
  return { queue, clock, log, renewals, entries, close: () => (closed = true) };
}

describe('createRenewedFairQueue', () => {
  it('close() resolves only once every running wait has left, waking sleepers until they are out', async () => {
    const joined = gate<QueueStep>();
    const { queue, clock, log, close } = testQueue(() => joined.promise);
    const outcome = queue.acquireQueued(request(new AbortController().signal)).catch((e) => e);
    await flush();
    close();
    let closeDone = false;
    const closing = queue.close().then(() => {
      closeDone = true;
    });
    for (let i = 0; i < 5; i += 1) {
      clock.advance(20);
      await flush();
    }
    // The join is still running: its wait has not left.
    expect(closeDone).toBe(false);
    // The join answers after the wake-up: the waiter goes to sleep, and only a later wake-up
    // lets it find the backend closed.
    joined.resolve({ kind: 'holder' });
    await flush();
    expect(closeDone).toBe(false);
    clock.advance(20);
    await closing;
    expect(await outcome).toMatchObject({
      code: 'UNAVAILABLE',
      message: 'acquire: the test backend is closed',
    });
    expect(log).toEqual(['join', 'stop', 'leave 1']);
  });

  it('entries are renewed every third of waiterTtlMs while queued, and no longer once they left', async () => {
    const { queue, clock, renewals } = testQueue(() => ({ kind: 'holder' }));
    const controller = new AbortController();
    const waiting = queue.acquireQueued(request(controller.signal));
    await flush();
    clock.advance(99);
    await flush();
    expect(renewals).toEqual([]);
    clock.advance(1);
    await flush();
    clock.advance(100);
    await flush();
    expect(renewals).toEqual([[['x', ['1']]], [['x', ['1']]]]);
    controller.abort();
    expect(await waiting).toEqual({ granted: false });
    // The renewal already scheduled goes out with nothing in it; none is scheduled after it.
    for (let i = 0; i < 3; i += 1) {
      clock.advance(100);
      await flush();
    }
    expect(renewals).toEqual([[['x', ['1']]], [['x', ['1']]], []]);
  });

  it('a failing renewal is retried at the next period', async () => {
    let failures = 0;
    const { queue, clock } = testQueue(() => ({ kind: 'holder' }), {
      renew: async () => {
        failures += 1;
        throw new Error('no answer');
      },
    });
    const controller = new AbortController();
    const waiting = queue.acquireQueued(request(controller.signal));
    await flush();
    for (let i = 0; i < 3; i += 1) {
      clock.advance(100);
      await flush();
    }
    expect(failures).toBe(3);
    controller.abort();
    await waiting;
  });

  it('resync() renews at once and every sleeping waiter looks again', async () => {
    const { queue, log, renewals } = testQueue(() => ({ kind: 'holder' }));
    const controller = new AbortController();
    const waiting = queue.acquireQueued(request(controller.signal));
    await flush();
    expect(log).toEqual(['join']);
    queue.resync();
    await flush();
    expect(renewals).toEqual([[['x', ['1']]]]);
    expect(log).toEqual(['join', 'look']);
    controller.abort();
    await waiting;
  });

  it("sleeping on an entry ahead looks again aheadSlackMs after that entry's end; first() is this server's oldest", async () => {
    const { queue, clock, log, entries } = testQueue((entry) =>
      entry.id === '1'
        ? entry.sleepOn({ ahead: { id: 'elsewhere', endsInMs: 100 } })
        : entry.sleepOn({ ahead: { id: '1', endsInMs: 1_000 } }),
    );
    const [first, second] = [new AbortController(), new AbortController()];
    const waits = [
      queue.acquireQueued(request(first.signal)),
      queue.acquireQueued(request(second.signal)),
    ];
    await flush();
    expect(entries.map((entry) => entry.first())).toEqual([true, false]);
    clock.advance(109);
    await flush();
    expect(log).toEqual(['join', 'join']);
    clock.advance(1);
    await flush();
    expect(log).toEqual(['join', 'join', 'look']);
    first.abort();
    await waits[0];
    // The oldest entry gone, the next one is this server's oldest.
    expect(entries.map((entry) => entry.first())).toEqual([false, true]);
    second.abort();
    await waits[1];
  });

  it('acquire() runs each wait, and close() waits for it too', async () => {
    const tried = gate<void>();
    const { queue, clock } = testQueue(() => ({ kind: 'holder' }), {
      acquire: async () => {
        await tried.promise;
        return { granted: false };
      },
    });
    const waiting = queue.acquireQueued(request(new AbortController().signal));
    let closeDone = false;
    const closing = queue.close().then(() => {
      closeDone = true;
    });
    clock.advance(100);
    await flush();
    expect(closeDone).toBe(false);
    tried.resolve();
    expect(await waiting).toEqual({ granted: false });
    await closing;
    expect(closeDone).toBe(true);
  });
});
