import { describe, expect, it } from 'vitest';
import type { AcquireRequest, Grant } from '../src/backend.js';
import { type Clock, createManualClock } from '../src/clock.js';
import { DlmError, isDlmError } from '../src/errors.js';
import {
  createFairQueue,
  type FairQueueDriver,
  type QueueStep,
  type QueueWatcher,
} from '../src/fair-queue.js';

// The real queues are covered against etcd and ZooKeeper (adapter tests and conformance). These
// cover the loop's paths a real server rarely produces on demand: an abort while joining, a
// failing leave, a grant that lands as the deadline passes, a change seen during a look.

const grant = (name = 'x'): Grant => ({ name, owner: 'o', token: 1n, ttlMs: 1_000 });

/** A promise with its resolve, to hold a driver call until the test lets it go. */
function gate<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A manual clock that knows which of its timers are still armed. */
function countingClock() {
  const manual = createManualClock();
  const armed = new Set<object>();
  const clock: Clock = {
    now: manual.now,
    setTimer(callback, delayMs) {
      const mark = {};
      armed.add(mark);
      const timer = manual.setTimer(() => armed.delete(mark) && callback(), delayMs);
      return { cancel: () => armed.delete(mark) && timer.cancel() };
    },
  };
  return { clock, advance: manual.advance, pending: () => armed.size };
}

type Script = (watcher: QueueWatcher) => Promise<QueueStep>;

/**
 * An in-process driver: `join` marks it queued and returns the next scripted step, `look`
 * returns the next ones; every call is logged.
 */
function scriptedDriver(steps: Script[], leave: () => Promise<void> = async () => {}) {
  const log: string[] = [];
  let queued = false;
  let watcher!: QueueWatcher;
  const next = (what: string) => {
    log.push(what);
    const step = steps.shift();
    if (!step) throw new Error(`no step scripted for ${what}`);
    return step(watcher);
  };
  const make = (request: AcquireRequest, given: QueueWatcher): FairQueueDriver => {
    watcher = given;
    log.push(`open ${request.name}`);
    return {
      queued: () => queued,
      async join() {
        const step = await next('join');
        queued = step.kind !== 'granted';
        return step;
      },
      async look() {
        const step = await next('look');
        if (step.kind === 'granted') queued = false;
        return step;
      },
      stop: () => log.push('stop'),
      async leave() {
        log.push('leave');
        queued = false;
        await leave();
      },
    };
  };
  return { make, log, watcher: () => watcher };
}

function queueWith(
  driver: ReturnType<typeof scriptedDriver>,
  clock: Clock = createManualClock(),
  isClosed = () => false,
) {
  return createFairQueue({
    clock,
    backend: 'test',
    isClosed,
    expirySlackMs: 50,
    driver: driver.make,
  });
}

const request = (signal: AbortSignal, name = 'x') => ({ name, owner: 'o', ttlMs: 1_000, signal });
const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('createFairQueue', () => {
  it('an abort while joining leaves the queue the join just entered, without looking', async () => {
    const joined = gate<QueueStep>();
    const driver = scriptedDriver([() => joined.promise]);
    const controller = new AbortController();
    const result = queueWith(driver).acquireQueued(request(controller.signal));
    await flush();
    controller.abort();
    joined.resolve({ kind: 'predecessor' });
    expect(await result).toEqual({ granted: false });
    expect(driver.log).toEqual(['open x', 'join', 'stop', 'leave']);
  });

  it('a failing leave neither fails the wait nor hides the error that ended it', async () => {
    const controller = new AbortController();
    const timedOut = scriptedDriver(
      [async () => ({ kind: 'again' }), async () => ({ kind: 'holder', ttlRemainingMs: 300 })],
      () => Promise.reject(new Error('no answer')),
    );
    const waiting = queueWith(timedOut).acquireQueued(request(controller.signal));
    await flush();
    controller.abort();
    expect(await waiting).toEqual({ granted: false, ttlRemainingMs: 300 });
    expect(timedOut.log).toEqual(['open x', 'join', 'look', 'stop', 'leave']);

    const failing = scriptedDriver(
      [
        async () => ({ kind: 'again' }),
        async () => {
          throw new DlmError('UNAVAILABLE', 'look: backend did not answer');
        },
      ],
      () => Promise.reject(new Error('no answer')),
    );
    const failed = queueWith(failing).acquireQueued(request(new AbortController().signal));
    await expect(failed).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: 'look: backend did not answer',
    });
    expect(failing.log.slice(-2)).toEqual(['stop', 'leave']);
  });

  it('a grant that lands as the deadline passes is reported (the caller hands it back)', async () => {
    const looked = gate<QueueStep>();
    const driver = scriptedDriver([async () => ({ kind: 'again' }), () => looked.promise]);
    const controller = new AbortController();
    const result = queueWith(driver).acquireQueued(request(controller.signal));
    await flush();
    controller.abort();
    looked.resolve({ kind: 'granted', grant: grant() });
    expect(await result).toEqual({ granted: true, grant: grant() });
    // Granted: nothing of ours is left in the queue.
    expect(driver.log).toEqual(['open x', 'join', 'look', 'stop']);
  });

  it('tells the request it waits (onWaiting) once, at its first sleep; never when granted at once', async () => {
    let told = 0;
    const onWaiting = () => {
      told += 1;
    };
    const free = scriptedDriver([
      async () => ({ kind: 'again' }),
      async () => ({ kind: 'granted', grant: grant() }),
    ]);
    const signal = new AbortController().signal;
    await queueWith(free).acquireQueued({ ...request(signal), onWaiting });
    expect(told).toBe(0);

    const watcher = () => held.watcher();
    const held = scriptedDriver([
      async () => ({ kind: 'predecessor' }),
      async () => ({ kind: 'holder' }),
      async () => ({ kind: 'granted', grant: grant() }),
    ]);
    const waiting = queueWith(held).acquireQueued({ ...request(signal), onWaiting });
    await flush();
    expect(told).toBe(1);
    watcher().changed();
    await flush();
    watcher().changed();
    await waiting;
    expect(told).toBe(1);
  });

  it("sleeps at the head until the holder's lease plus the slack, on the clock", async () => {
    const { clock, advance, pending } = countingClock();
    const driver = scriptedDriver([
      async () => ({ kind: 'holder', ttlRemainingMs: 1_000 }),
      async () => ({ kind: 'granted', grant: grant() }),
    ]);
    const result = queueWith(driver, clock).acquireQueued(request(new AbortController().signal));
    await flush();
    expect(pending()).toBe(1);
    advance(1_049);
    await flush();
    expect(driver.log).toEqual(['open x', 'join']);
    advance(1);
    expect(await result).toEqual({ granted: true, grant: grant() });
    expect(pending()).toBe(0);
  });

  it('a wake cancels the timer; a change during a look skips the sleep only if it concerns it', async () => {
    const { clock, pending } = countingClock();
    const looked: string[] = [];
    const driver = scriptedDriver([
      // During the join, a change about predecessors only: the holder step is slept on.
      async (watcher) => {
        watcher.changed((step) => step.kind === 'predecessor');
        return { kind: 'holder', ttlRemainingMs: 5_000 };
      },
      // During this look, a change about holders: the holder step is not slept on.
      async (watcher) => {
        looked.push('first');
        watcher.changed((step) => step.kind === 'holder');
        return { kind: 'holder', ttlRemainingMs: 5_000 };
      },
      async () => {
        looked.push('second');
        return { kind: 'granted', grant: grant() };
      },
    ]);
    const result = queueWith(driver, clock).acquireQueued(request(new AbortController().signal));
    await flush();
    expect(looked).toEqual([]);
    expect(pending()).toBe(1);
    // A change about what it does not sleep on leaves it asleep; one about it wakes it.
    expect(driver.watcher().changed((step) => step.kind === 'predecessor')).toBeUndefined();
    expect(driver.watcher().changed()).toEqual({ kind: 'holder', ttlRemainingMs: 5_000 });
    expect(await result).toEqual({ granted: true, grant: grant() });
    expect(looked).toEqual(['first', 'second']);
    expect(pending()).toBe(0);
  });

  it("joins this server's waiters for one name in the order they called", async () => {
    const slow = gate<QueueStep>();
    const order: string[] = [];
    const first = scriptedDriver([
      async () => {
        order.push('first joins');
        return slow.promise;
      },
    ]);
    const second = scriptedDriver([
      async () => {
        order.push('second joins');
        return { kind: 'predecessor' };
      },
    ]);
    const drivers = [first, second];
    const queue = createFairQueue({
      clock: createManualClock(),
      backend: 'test',
      isClosed: () => false,
      expirySlackMs: 50,
      driver: (req, watcher) => drivers.shift()!.make(req, watcher),
    });
    const controllers = [new AbortController(), new AbortController()];
    const waits = controllers.map((c) => queue.acquireQueued(request(c.signal)));
    await flush();
    expect(order).toEqual(['first joins']);
    slow.resolve({ kind: 'predecessor' });
    await flush();
    expect(order).toEqual(['first joins', 'second joins']);
    for (const c of controllers) c.abort();
    expect(await Promise.all(waits)).toEqual([{ granted: false }, { granted: false }]);
  });

  it('a closed backend ends sleeping waits with UNAVAILABLE; other errors become UNAVAILABLE', async () => {
    let closed = false;
    const driver = scriptedDriver([async () => ({ kind: 'predecessor' })]);
    const queue = queueWith(driver, createManualClock(), () => closed);
    const waiting = queue.acquireQueued(request(new AbortController().signal));
    await flush();
    closed = true;
    queue.wakeAll();
    await expect(waiting).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: 'acquire: the test backend is closed',
    });
    expect(driver.log.slice(-2)).toEqual(['stop', 'leave']);
    await expect(queue.acquireQueued(request(new AbortController().signal))).rejects.toSatisfy(
      (error) => isDlmError(error, 'UNAVAILABLE'),
    );

    const broken = scriptedDriver([
      async () => {
        throw new TypeError('boom');
      },
    ]);
    const error = await queueWith(broken)
      .acquireQueued(request(new AbortController().signal))
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', message: 'acquire: boom' });
    expect((error as Error).cause).toBeInstanceOf(TypeError);
  });

  it('an already aborted signal returns at once, without a driver', async () => {
    const driver = scriptedDriver([]);
    const controller = new AbortController();
    controller.abort();
    expect(await queueWith(driver).acquireQueued(request(controller.signal))).toEqual({
      granted: false,
    });
    expect(driver.log).toEqual([]);
  });
});
