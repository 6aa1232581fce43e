import { describe, expect, it } from 'vitest';
import type { AcquireRequest, Grant } from '../src/backend.js';
import { type Clock, createManualClock, type ManualClock } from '../src/clock.js';
import { DlmError, isDlmError } from '../src/errors.js';
import type {
  BackendQueue,
  QueueChange,
  QueueDriver,
  QueueRenewal,
  QueueStep,
  QueueWaiter,
} from '../src/queue-driver.js';
import { waitLoopOf } from '../src/wait-loop.js';

// The real drivers are covered against etcd, ZooKeeper, Redis and PostgreSQL (adapter tests and
// conformance), and the per-server FIFO on every backend. These cover the loop's paths a real
// server rarely produces on demand: an abort while joining, a failing leave (retried), a grant
// that lands as the deadline passes, a change seen during a look, the wake rules, renewals,
// closing.

const grant = (name = 'x', ttlMs = 1_000): Grant => ({ name, owner: 'o', token: 1n, ttlMs });

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

type Script = (waiter: QueueWaiter, left?: QueueChange) => Promise<QueueStep> | QueueStep;

/**
 * An in-process driver: `join` queues it as `id` and returns the next scripted step, `look`
 * returns the ones after; every call is logged.
 */
function scripted(id: string, steps: Script[], leave: () => Promise<void> = async () => {}) {
  const log: string[] = [];
  let queued: string | undefined;
  let waiter!: QueueWaiter;
  const next = (what: string, left?: QueueChange) => {
    log.push(what);
    const step = steps.shift();
    if (!step) throw new Error(`no step scripted for ${what}`);
    return step(waiter, left);
  };
  const make = (given: QueueWaiter): QueueDriver => {
    waiter = given;
    return {
      entry: () => queued,
      async join() {
        const step = await next('join');
        queued = step.kind === 'granted' || step.kind === 'conflict' ? undefined : id;
        return step;
      },
      async look(left) {
        const step = await next(left ? `look after ${left.key}` : 'look', left);
        if (step.kind === 'granted') queued = undefined;
        return step;
      },
      stop: () => log.push('stop'),
      async leave(entry) {
        log.push(`leave ${entry}`);
        await leave();
        queued = undefined;
      },
    };
  };
  return { make, log, waiter: () => waiter };
}

/** A queue whose waits take the next of `drivers`, in the order they start. */
function queueOf(
  drivers: ReturnType<typeof scripted>[],
  more: Partial<BackendQueue> & { clock?: Clock } = {},
) {
  let closed = false;
  const queue: BackendQueue = {
    clock: createManualClock(),
    expirySlackMs: 50,
    isClosed: () => closed,
    driver: (_request, waiter) => drivers.shift()!.make(waiter),
    ...more,
  };
  return { loop: waitLoopOf(queue, 'test'), close: () => (closed = true) };
}

const request = (name = 'x', mode?: 'shared'): AcquireRequest => ({
  name,
  owner: 'o',
  ttlMs: 1_000,
  ...(mode ? { mode, limit: 3 } : {}),
});
const flush = async () => {
  for (let i = 0; i < 5; i += 1) await new Promise((resolve) => setImmediate(resolve));
};

describe('the wait loop', () => {
  it('an abort while joining leaves the queue the join just entered, without looking', async () => {
    const joined = gate<QueueStep>();
    const driver = scripted('1', [() => joined.promise]);
    const controller = new AbortController();
    const result = queueOf([driver]).loop.run(request(), controller.signal);
    await flush();
    controller.abort();
    joined.resolve({ kind: 'predecessor' });
    expect(await result).toEqual({ kind: 'ended', ttlRemainingMs: undefined });
    expect(driver.log).toEqual(['join', 'stop', 'leave 1']);
  });

  it('a failing leave neither fails the wait nor hides its error, and is retried until done', async () => {
    const { clock, advance } = countingClock();
    let failures = 2;
    const leave = async () => {
      if (failures-- > 0) throw new Error('no answer');
    };
    const controller = new AbortController();
    const timedOut = scripted(
      '1',
      [() => ({ kind: 'again' }), () => ({ kind: 'holder', ttlRemainingMs: 300 })],
      leave,
    );
    const waiting = queueOf([timedOut], { clock }).loop.run(request(), controller.signal);
    await flush();
    controller.abort();
    expect(await waiting).toEqual({ kind: 'ended', ttlRemainingMs: 300 });
    expect(timedOut.log).toEqual(['join', 'look', 'stop', 'leave 1']);
    // Retried later (backoff up to 5 s), until the store answers.
    for (let i = 0; i < 4; i += 1) {
      advance(5_000);
      await flush();
    }
    expect(timedOut.log.filter((entry) => entry === 'leave 1')).toHaveLength(3);

    const failing = scripted(
      '2',
      [
        () => ({ kind: 'again' }),
        () => {
          throw new DlmError('UNAVAILABLE', 'look: backend did not answer');
        },
      ],
      () => Promise.reject(new Error('no answer')),
    );
    const failed = queueOf([failing]).loop.run(request(), new AbortController().signal);
    await expect(failed).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: 'look: backend did not answer',
    });
    expect(failing.log.slice(-2)).toEqual(['stop', 'leave 2']);
  });

  it('a grant that lands as the deadline passes is reported (the caller hands it back)', async () => {
    const looked = gate<QueueStep>();
    const driver = scripted('1', [() => ({ kind: 'again' }), () => looked.promise]);
    const controller = new AbortController();
    const result = queueOf([driver]).loop.run(request(), controller.signal);
    await flush();
    controller.abort();
    looked.resolve({ kind: 'granted', grant: grant() });
    expect(await result).toEqual({ kind: 'granted', grant: grant(), sentAt: 0 });
    // Granted: nothing of ours is left in the queue.
    expect(driver.log).toEqual(['join', 'look', 'stop']);
  });

  it("a grant's lease counts from the look that made it, or from when the driver says it was sent", async () => {
    const manual = createManualClock();
    const late = scripted('1', [
      async () => {
        manual.advance(700);
        return { kind: 'granted', grant: grant() };
      },
    ]);
    const handed = scripted('2', [() => ({ kind: 'granted', grant: grant(), sentAt: 100 })]);
    const signal = new AbortController().signal;
    const first = await queueOf([late], { clock: manual }).loop.run(request(), signal);
    expect(first).toMatchObject({ kind: 'granted', sentAt: 0 });
    const second = await queueOf([handed], { clock: manual }).loop.run(request(), signal);
    expect(second).toMatchObject({ kind: 'granted', sentAt: 100 });
  });

  it('tells the wait it waits (onWaiting) once, at its first sleep; never when granted at once', async () => {
    let told = 0;
    const onWaiting = () => {
      told += 1;
    };
    const signal = new AbortController().signal;
    const free = scripted('1', [
      () => ({ kind: 'again' }),
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    await queueOf([free]).loop.run(request(), signal, onWaiting);
    expect(told).toBe(0);
    const held = scripted('2', [
      () => ({ kind: 'holder', ttlRemainingMs: 60_000 }),
      () => ({ kind: 'holder', ttlRemainingMs: 60_000 }),
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    const { loop } = queueOf([held]);
    const waiting = loop.run(request(), signal, onWaiting);
    await flush();
    expect(told).toBe(1);
    loop.waits.report('x', { what: 'holder-ended' });
    await flush();
    loop.waits.report('x', { what: 'holder-ended' });
    await waiting;
    expect(told).toBe(1);
  });

  it("sleeps at the head until the holder's lease plus the slack, on the clock", async () => {
    const { clock, advance, pending } = countingClock();
    const driver = scripted('1', [
      () => ({ kind: 'holder', ttlRemainingMs: 1_000 }),
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    const result = queueOf([driver], { clock }).loop.run(request(), new AbortController().signal);
    await flush();
    expect(pending()).toBe(1);
    advance(1_049);
    await flush();
    expect(driver.log).toEqual(['join']);
    advance(1);
    expect(await result).toMatchObject({ kind: 'granted', grant: grant() });
    expect(pending()).toBe(0);
  });

  it('a wake cancels the timer; a change during a look skips the sleep only if it concerns it', async () => {
    const { clock, pending } = countingClock();
    const driver = scripted('1', [
      () => ({ kind: 'holder', ttlRemainingMs: 5_000 }),
      // During this look a holder ends: the holder step it finds is not slept on.
      () => {
        loop.waits.report('x', { what: 'holder-ended' });
        return { kind: 'holder', ttlRemainingMs: 5_000 };
      },
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    const { loop } = queueOf([driver], { clock });
    const result = loop.run(request(), new AbortController().signal);
    await flush();
    expect(pending()).toBe(1);
    // An entry leaving that it does not sleep on leaves it asleep; a holder's end wakes it.
    loop.waits.report('x', { what: 'entry-left', key: 'elsewhere' });
    await flush();
    expect(driver.log).toEqual(['join']);
    loop.waits.report('x', { what: 'holder-ended' });
    expect(await result).toMatchObject({ kind: 'granted' });
    expect(driver.log).toEqual(['join', 'look', 'look', 'stop']);
    expect(pending()).toBe(0);
  });

  it('the wake rules: an entry leaving wakes the waiter behind it and shared waiters on the holders; a driver wakes its own', async () => {
    const behind = scripted('2', [
      () => ({ kind: 'predecessor', key: 'a' }),
      () => ({ kind: 'holder' }),
    ]);
    const reader = scripted('3', [() => ({ kind: 'holder' }), () => ({ kind: 'holder' })]);
    const other = scripted('4', [() => ({ kind: 'holder' }), () => ({ kind: 'holder' })]);
    const { loop } = queueOf([behind, reader, other]);
    const controllers = [new AbortController(), new AbortController(), new AbortController()];
    const waits = [
      loop.run(request(), controllers[0]!.signal),
      loop.run(request('x', 'shared'), controllers[1]!.signal),
      loop.run(request('y'), controllers[2]!.signal),
    ];
    await flush();
    loop.waits.report('x', { what: 'entry-left', key: 'a' });
    await flush();
    // The waiter behind `a`, and the shared one on the holders (that entry may have left room).
    expect(behind.log).toEqual(['join', 'look after a']);
    expect(reader.log).toEqual(['join', 'look']);
    expect(other.log).toEqual(['join']);
    other.waiter().changed();
    await flush();
    expect(other.log).toEqual(['join', 'look']);
    for (const controller of controllers) controller.abort();
    await Promise.all(waits);
  });

  it('an exclusive waiter whose predecessor left with the lock sleeps on that holder without a look', async () => {
    const { clock, advance } = countingClock();
    const first = scripted('1', [
      () => ({ kind: 'holder', ttlRemainingMs: 100 }),
      () => ({ kind: 'granted', grant: grant('x', 800) }),
    ]);
    const second = scripted('2', [
      () => ({ kind: 'predecessor', key: '1' }),
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    const { loop } = queueOf([first, second], { clock });
    const signal = new AbortController().signal;
    const waits = [loop.run(request(), signal), loop.run(request(), signal)];
    await flush();
    loop.waits.report('x', { what: 'holder-ended' });
    expect(await waits[0]).toMatchObject({ kind: 'granted' });
    await flush();
    // Told by this server's own first waiter that it left with an 800 ms lease: asleep on it.
    expect(second.log).toEqual(['join']);
    advance(849);
    await flush();
    expect(second.log).toEqual(['join']);
    advance(1);
    expect(await waits[1]).toMatchObject({ kind: 'granted' });
    expect(second.log).toEqual(['join', 'look', 'stop']);
  });

  it("a holder's end heard right after its grant's departure (one read of the stream) is not lost", async () => {
    const { clock, pending } = countingClock();
    const behind = scripted('2', [
      () => ({ kind: 'predecessor', key: '1' }),
      () => ({ kind: 'granted', grant: grant() }),
    ]);
    const { loop } = queueOf([behind], { clock });
    const wait = loop.run(request(), new AbortController().signal);
    await flush();
    // Another server's waiter `1` left with an 800 ms lease and released it at once: both are
    // reported before the woken waiter runs again, so its step on that holder takes no look.
    loop.waits.report('x', { what: 'entry-left', key: '1', grantedMs: 800 });
    loop.waits.report('x', { what: 'holder-ended' });
    await flush();
    // It looks at once rather than sleeping out the lease.
    expect(behind.log).toEqual(['join', 'look', 'stop']);
    expect(await wait).toMatchObject({ kind: 'granted' });
    expect(pending()).toBe(0);
  });

  it("joins this server's waiters for one name in the order they called", async () => {
    const slow = gate<QueueStep>();
    const order: string[] = [];
    const first = scripted('1', [
      async () => {
        order.push('first joins');
        return slow.promise;
      },
    ]);
    const second = scripted('2', [
      () => {
        order.push('second joins');
        return { kind: 'predecessor', key: '1' };
      },
    ]);
    const { loop } = queueOf([first, second]);
    const controllers = [new AbortController(), new AbortController()];
    const waits = controllers.map((c) => loop.run(request(), c.signal));
    await flush();
    expect(order).toEqual(['first joins']);
    expect(loop.waits.drivers('x')).toHaveLength(2);
    slow.resolve({ kind: 'predecessor', key: 'elsewhere' });
    await flush();
    expect(order).toEqual(['first joins', 'second joins']);
    for (const c of controllers) c.abort();
    await Promise.all(waits);
    expect(loop.waits.drivers('x')).toEqual([]);
  });

  it('a closed backend ends sleeping waits with UNAVAILABLE; other errors become UNAVAILABLE', async () => {
    const driver = scripted('1', [() => ({ kind: 'predecessor' })]);
    const { loop, close } = queueOf([driver]);
    const waiting = loop.run(request(), new AbortController().signal);
    await flush();
    close();
    loop.waits.resync();
    await expect(waiting).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: 'acquire: the test backend is closed',
    });
    expect(driver.log.slice(-2)).toEqual(['stop', 'leave 1']);
    await expect(loop.run(request(), new AbortController().signal)).rejects.toSatisfy((error) =>
      isDlmError(error, 'UNAVAILABLE'),
    );

    const broken = scripted('2', [
      () => {
        throw new TypeError('boom');
      },
    ]);
    const error = await queueOf([broken])
      .loop.run(request(), new AbortController().signal)
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'UNAVAILABLE', message: 'acquire: boom' });
    expect((error as Error).cause).toBeInstanceOf(TypeError);
  });

  it('an already aborted signal returns at once, without a driver', async () => {
    const driver = scripted('1', []);
    const controller = new AbortController();
    controller.abort();
    expect(await queueOf([driver]).loop.run(request(), controller.signal)).toEqual({
      kind: 'ended',
    });
    expect(driver.log).toEqual([]);
  });
});

/** A queue whose entries live only while renewed (every renewal recorded). */
function renewedQueue(drivers: ReturnType<typeof scripted>[], renew?: QueueRenewal['renew']) {
  const clock: ManualClock = createManualClock();
  const renewals: [string, string[]][][] = [];
  const renewal: QueueRenewal = {
    waiterTtlMs: 300,
    renew:
      renew ??
      (async (byName) => {
        renewals.push([...byName].map(([name, ids]) => [name, [...ids]]));
      }),
  };
  return { ...queueOf(drivers, { clock, renewal, aheadSlackMs: 10 }), clock, renewals };
}

describe('the wait loop over entries that live only while renewed', () => {
  it('waits.close() resolves only once every running wait has left, waking sleepers until they are out', async () => {
    const joined = gate<QueueStep>();
    const driver = scripted('1', [() => joined.promise]);
    const { loop, clock } = renewedQueue([driver]);
    const outcome = loop.run(request(), new AbortController().signal).catch((e) => e);
    await flush();
    let closeDone = false;
    const closing = loop.waits.close().then(() => {
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
    expect(driver.log).toEqual(['join', 'stop', 'leave 1']);
  });

  it('entries are renewed every third of waiterTtlMs while queued, and no longer once they left', async () => {
    const driver = scripted('1', [() => ({ kind: 'holder' })]);
    const { loop, clock, renewals } = renewedQueue([driver]);
    const controller = new AbortController();
    const waiting = loop.run(request(), controller.signal);
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
    await waiting;
    for (let i = 0; i < 3; i += 1) {
      clock.advance(100);
      await flush();
    }
    expect(renewals).toEqual([[['x', ['1']]], [['x', ['1']]]]);
  });

  it('a failing renewal is retried at the next period', async () => {
    let failures = 0;
    const driver = scripted('1', [() => ({ kind: 'holder' })]);
    const { loop, clock } = renewedQueue([driver], async () => {
      failures += 1;
      throw new Error('no answer');
    });
    const controller = new AbortController();
    const waiting = loop.run(request(), controller.signal);
    await flush();
    for (let i = 0; i < 3; i += 1) {
      clock.advance(100);
      await flush();
    }
    expect(failures).toBe(3);
    controller.abort();
    await waiting;
  });

  it('waits.resync() renews at once and every sleeping waiter looks again', async () => {
    const driver = scripted('1', [() => ({ kind: 'holder' }), () => ({ kind: 'holder' })]);
    const { loop, renewals } = renewedQueue([driver]);
    const controller = new AbortController();
    const waiting = loop.run(request(), controller.signal);
    await flush();
    expect(driver.log).toEqual(['join']);
    loop.waits.resync();
    await flush();
    expect(renewals).toEqual([[['x', ['1']]]]);
    expect(driver.log).toEqual(['join', 'look']);
    controller.abort();
    await waiting;
  });

  it("on an entry ahead, looks again aheadSlackMs after its end; a holder's end wakes this server's oldest waiter", async () => {
    const first = scripted('1', [
      () => ({ kind: 'predecessor', key: 'elsewhere', endsInMs: 100 }),
      () => ({ kind: 'predecessor', key: 'elsewhere' }),
      () => ({ kind: 'predecessor', key: 'elsewhere' }),
    ]);
    const second = scripted('2', [() => ({ kind: 'predecessor', key: '1', endsInMs: 1_000 })]);
    const { loop, clock } = renewedQueue([first, second]);
    const controllers = [new AbortController(), new AbortController()];
    const waits = controllers.map((c) => loop.run(request(), c.signal));
    await flush();
    clock.advance(109);
    await flush();
    expect(first.log).toEqual(['join']);
    clock.advance(1);
    await flush();
    expect(first.log).toEqual(['join', 'look']);
    // The entry it sleeps on may be a dead server's: the oldest waiter here looks on an end.
    loop.waits.report('x', { what: 'holder-ended' });
    await flush();
    expect(first.log).toEqual(['join', 'look', 'look']);
    expect(second.log).toEqual(['join']);
    for (const controller of controllers) controller.abort();
    await Promise.all(waits);
  });
});
