import { describe, expect, it } from 'vitest';
import type { LockBackend } from '../src/backend.js';
import { createManualClock, type ManualClock } from '../src/clock.js';
import { isDlmError } from '../src/errors.js';
import type { LockService } from '../src/lock-service.js';
import type { LockObserver } from '../src/observer.js';
// The service runs on the real embedded backend, imported by a relative path, not a dependency:
// the embedded adapter depends on core, and a workspace cycle would break the build graph.
import { queueOver, serviceScope, settle } from './service-scope.js';

type Event = [string, ...unknown[]];

/** An observer that records every call, in order, as `[callback, ...arguments]`. */
function recorder(): { observer: Required<LockObserver>; events: Event[] } {
  const events: Event[] = [];
  const observer: Required<LockObserver> = {
    granted: (lease, waitedMs) => events.push(['granted', lease.name, lease.token, waitedMs]),
    extended: (lease) => events.push(['extended', lease.name, lease.token, lease.ttlMs]),
    released: (name, token) => events.push(['released', name, token]),
    lost: (event) => events.push(['lost', event.name, event.token, event.reason]),
    waiting: (name, count) => events.push(['waiting', name, count]),
    releaseRequested: (request) =>
      events.push(['releaseRequested', request.name, request.notified, request.reason]),
    releaseRequestHeard: (event) =>
      events.push(['releaseRequestHeard', event.name, event.token, event.reason]),
    backendCall: (operation, durationMs, error) =>
      events.push(['backendCall', operation, durationMs, error]),
  };
  return { observer, events };
}

const named = (events: Event[], kind: string) => events.filter((event) => event[0] === kind);

describe('LockObserver', () => {
  const openService = serviceScope();
  let clock: ManualClock;
  let service: LockService;

  async function open(observer: LockObserver, wrap?: (b: LockBackend) => LockBackend) {
    clock = createManualClock(1_000);
    service = await openService({ clock, observer }, wrap);
  }

  /** `one` holds `name`; `two` asks for it (waiting up to 5 s) and is queued when this resolves. */
  async function heldAndWaiting(name: string, holderTtlMs = 1_000) {
    const held = await service.acquire({ name, owner: 'one', ttlMs: holderTtlMs });
    const waiting = service.acquire({ name, owner: 'two', ttlMs: 1_000, waitMs: 5_000 });
    await settle();
    return { held, waiting };
  }

  it('reports a grant, an extend and a release, each with the backend call behind it', async () => {
    const { observer, events } = recorder();
    await open(observer);
    const lease = await service.acquire({ name: 'a', owner: 'o', ttlMs: 1_000 });
    expect(named(events, 'granted')).toEqual([['granted', 'a', lease.token, 0]]);
    const extended = await service.extend({ name: 'a', token: lease.token, ttlMs: 2_000 });
    expect(named(events, 'extended')).toEqual([['extended', 'a', lease.token, extended.ttlMs]]);
    await service.release({ name: 'a', token: lease.token });
    expect(named(events, 'released')).toEqual([['released', 'a', lease.token]]);
    await service.get('a');
    expect(named(events, 'backendCall').map((event) => event.slice(1))).toEqual([
      ['tryAcquire', 0, undefined],
      ['extend', 0, undefined],
      ['release', 0, undefined],
      ['inspect', 0, undefined],
    ]);
    expect(named(events, 'lost')).toEqual([]);
  });

  it('reports a queued acquire: the queue length as it changes, and how long it waited', async () => {
    const { observer, events } = recorder();
    await open(observer);
    const { held: first, waiting: second } = await heldAndWaiting('q');
    expect(named(events, 'waiting')).toEqual([['waiting', 'q', 1]]);
    clock.advance(300);
    await service.release({ name: 'q', token: first.token });
    const lease = await second;
    expect(named(events, 'waiting')).toEqual([
      ['waiting', 'q', 1],
      ['waiting', 'q', 0],
    ]);
    expect(named(events, 'granted')).toEqual([
      ['granted', 'q', first.token, 0],
      ['granted', 'q', lease.token, 300],
    ]);
  });

  it('an acquire that may wait but finds the lock free is no waiter: no queue is reported', async () => {
    const { observer, events } = recorder();
    await open(observer);
    const lease = await service.acquire({ name: 'free', owner: 'o', ttlMs: 1_000, waitMs: 5_000 });
    expect(named(events, 'granted')).toEqual([['granted', 'free', lease.token, 0]]);
    expect(named(events, 'waiting')).toEqual([]);
    // One that did wait is counted from its first sleep, and one behind it from its own.
    const { waiting } = await heldAndWaiting('busy', 10_000);
    const behind = service.acquire({ name: 'busy', owner: 'three', ttlMs: 1_000, waitMs: 500 });
    await settle();
    expect(service.waiters('busy')).toBe(2);
    expect(named(events, 'waiting')).toEqual([
      ['waiting', 'busy', 1],
      ['waiting', 'busy', 2],
    ]);
    clock.advance(500);
    await expect(behind).rejects.toSatisfy((error) => isDlmError(error, 'LOCK_HELD'));
    expect(service.waiters('busy')).toBe(1);
    void waiting.catch(() => undefined);
  });

  it('a wait that joins behind a sleeping head asks the backend nothing; a release serves them in order', async () => {
    const { observer, events } = recorder();
    await open(observer);
    const { held, waiting: head } = await heldAndWaiting('w', 10_000);
    const calls = () => named(events, 'backendCall').length;
    const asleep = calls();
    const behind = [3, 4, 5].map((n) =>
      service.acquire({ name: 'w', owner: `owner-${n}`, ttlMs: 1_000, waitMs: 5_000 }),
    );
    await settle();
    expect(calls()).toBe(asleep);
    await service.release({ name: 'w', token: held.token });
    const first = await head;
    let last = first;
    for (const [index, waiting] of behind.entries()) {
      await service.release({ name: 'w', token: last.token });
      const lease = await waiting;
      expect(lease.owner).toBe(`owner-${index + 3}`);
      expect(lease.token).toBeGreaterThan(last.token);
      last = lease;
    }
  });

  it('reports the queue emptying when a wait reaches its deadline', async () => {
    const { observer, events } = recorder();
    await open(observer);
    await service.acquire({ name: 'd', owner: 'one', ttlMs: 10_000 });
    const waiting = service.acquire({ name: 'd', owner: 'two', ttlMs: 1_000, waitMs: 500 });
    await settle();
    clock.advance(500);
    await expect(waiting).rejects.toSatisfy((error) => isDlmError(error, 'LOCK_HELD'));
    expect(named(events, 'waiting')).toEqual([
      ['waiting', 'd', 1],
      ['waiting', 'd', 0],
    ]);
    expect(named(events, 'granted')).toHaveLength(1);
  });

  it('reports a lease lost to expiry and one lost to revocation', async () => {
    const { observer, events } = recorder();
    await open(observer);
    const expiring = await service.acquire({ name: 'e', owner: 'o', ttlMs: 200 });
    clock.advance(250);
    await settle();
    const revoked = await service.acquire({ name: 'r', owner: 'o', ttlMs: 10_000 });
    await service.revoke('r');
    expect(named(events, 'lost')).toEqual([
      ['lost', 'e', expiring.token, 'expired'],
      ['lost', 'r', revoked.token, 'revoked'],
    ]);
    expect(named(events, 'backendCall').map((event) => event[1])).toContain('revoke');
  });

  it('reports a failed backend call with its error and its duration', async () => {
    const { observer, events } = recorder();
    const failure = new Error('the backend broke');
    await open(observer, (real) => ({
      ...real,
      capabilities: real.capabilities,
      watch: real.watch.bind(real),
      close: real.close.bind(real),
      inspect: async () => {
        clock.advance(7);
        throw failure;
      },
    }));
    await expect(service.get('x')).rejects.toBe(failure);
    expect(named(events, 'backendCall')).toEqual([['backendCall', 'inspect', 7, failure]]);
  });

  it('reports a wait in the backend queue as acquireQueued, and its queue length', async () => {
    const { observer, events } = recorder();
    // The embedded backend has no queue of its own: this one, a driver over its own try-lock,
    // is enough for core to take the path of a wait in the backend's queue.
    await open(observer, (real) => ({
      ...real,
      capabilities: { ...real.capabilities, fairQueue: true },
      queue: queueOver(real),
    }));
    const { held: first, waiting: second } = await heldAndWaiting('f');
    expect(service.waiters('f')).toBe(1);
    await service.release({ name: 'f', token: first.token });
    const lease = await second;
    expect(named(events, 'waiting')).toEqual([
      ['waiting', 'f', 1],
      ['waiting', 'f', 0],
    ]);
    expect(named(events, 'granted').at(-1)).toEqual(['granted', 'f', lease.token, 0]);
    expect(named(events, 'backendCall').map((event) => event[1])).toContain('acquireQueued');
  });

  it('a throwing observer changes nothing the service does', async () => {
    const angry = () => {
      throw new Error('observer failure');
    };
    await open({
      granted: angry,
      extended: angry,
      released: angry,
      lost: angry,
      waiting: angry,
      backendCall: angry,
    });
    const { held: lease, waiting } = await heldAndWaiting('t');
    await service.extend({ name: 't', token: lease.token, ttlMs: 1_000 });
    await service.release({ name: 't', token: lease.token });
    const next = await waiting;
    expect(service.holds('t', next.token)).toBe(true);
    await service.revoke('t');
    expect(service.holds('t', next.token)).toBe(false);
  });
});
