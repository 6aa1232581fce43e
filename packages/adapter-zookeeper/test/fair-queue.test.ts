import { failure, granted, lockName, pendingAfter, until } from '@dlm/conformance';
import {
  type Clock,
  createLockService,
  isDlmError,
  type LockService,
  systemClock,
} from '@dlm/core';
import { zookeeperAvailable } from '@dlm/test-services';
import { CreateMode } from 'node-zookeeper-client';
import { describe, expect, it } from 'vitest';
import { lockPaths } from '../src/zk-paths.js';
import { lastZxid, rawCall, useZooKeeper, waiterNodes } from './support.js';

const run = zookeeperAvailable();
const prefix = '/dlm-queue-test';
const paths = lockPaths(prefix);

describe.skipIf(!run)("zookeeper fair queue (core's loop over its driver)", () => {
  const { raw, open } = useZooKeeper(prefix);
  /** A dlm server over `backend` (a new one by default). */
  const server = (backend = open()) => createLockService({ backend });
  /** The waiter nodes of `name`'s queue, in queue order. */
  const waiters = (name: string) => waiterNodes(raw(), paths.parent(name));
  const untilQueued = (name: string, count: number) =>
    until(async () => (await waiters(name)).length >= count, {
      what: `${count} waiters in ${name}`,
    });
  const queued = (service: LockService, name: string, owner: string, signal?: AbortSignal) =>
    service.acquire({ name, owner, ttlMs: 5_000, waitMs: 60_000, ...(signal ? { signal } : {}) });

  it('a try-lock does not take a free lock while a waiter is queued for it', async () => {
    const backend = open();
    const name = lockName('no-barging');
    const holder = await granted(backend, name, 'holder');
    await backend.release({ name, token: holder.token });
    // A waiter at the head of the queue that has not taken the free lock yet.
    const waiter = await rawCall<string>((done) =>
      raw().create(
        `${paths.parent(name)}/raw-wait-`,
        Buffer.from('waiter'),
        CreateMode.EPHEMERAL_SEQUENTIAL,
        (error, path) => done(error, path),
      ),
    );
    expect((await backend.tryAcquire({ name, owner: 'barger', ttlMs: 5_000 })).granted).toBe(false);
    await rawCall((done) => raw().remove(waiter, -1, (error) => done(error)));
    expect((await granted(backend, name, 'barger')).owner).toBe('barger');
  });

  it("a release hands the lock to its own backend's head waiter in one write", async () => {
    const service = server();
    const { backend } = service;
    const name = lockName('hand-over');
    const holder = await granted(backend, name, 'holder');
    const events: string[] = [];
    const unsubscribe = backend.watch(name, (event) => events.push(`${event.type}:${event.token}`));
    const waiting = queued(service, name, 'next');
    await untilQueued(name, 1);
    // Asleep at the head: its look has answered.
    expect(await pendingAfter(waiting, 200)).toBe(true);
    const before = await lastZxid(raw(), prefix);
    expect(await backend.release({ name, token: holder.token })).toBe(true);
    const lease = await waiting;
    // The release and the grant are one transaction: a release and the waiter's own grant
    // would be two, and the token one higher.
    expect(lease.token).toBe(before + 1n);
    expect(await waiters(name)).toEqual([]);
    expect((await backend.inspect(name))?.owner).toBe('next');
    await until(() => events.length >= 2, { what: 'the release and the grant events' });
    expect(events).toEqual([`released:${holder.token}`, `acquired:${lease.token}`]);
    unsubscribe();
    expect(await backend.release({ name, token: lease.token })).toBe(true);
  });

  it("a release does not hand the lock to its own waiter while another server's is ahead", async () => {
    const [a, b] = [server(), server()];
    const name = lockName('no-local-favour');
    const holder = await granted(a.backend, name, 'holder');
    const first = queued(b, name, 'remote-first');
    await untilQueued(name, 1);
    const second = queued(a, name, 'local-second');
    await untilQueued(name, 2);
    expect(await pendingAfter(second, 200)).toBe(true);
    await a.backend.release({ name, token: holder.token });
    const lease = await first;
    expect(lease.owner).toBe('remote-first');
    expect(await pendingAfter(second, 200)).toBe(true);
    await b.release({ name, token: lease.token });
    expect((await second).owner).toBe('local-second');
  });

  it('a wait aborted while a release hands it the lock leaves the lock free', async () => {
    const service = server();
    const { backend } = service;
    const name = lockName('hand-over-abort');
    for (let round = 0; round < 20; round++) {
      const holder = await granted(backend, name, `holder-${round}`);
      const abort = new AbortController();
      const waiting = queued(service, name, `waiter-${round}`, abort.signal).catch(
        (error: unknown) => (isDlmError(error, 'CANCELLED') ? undefined : Promise.reject(error)),
      );
      await untilQueued(name, 1);
      await pendingAfter(waiting, 20 + round);
      // The abort lands before, during or after the release's hand-over.
      const release = backend.release({ name, token: holder.token });
      setTimeout(() => abort.abort(), round % 4);
      await release;
      const lease = await waiting;
      if (lease) await service.release({ name, token: lease.token });
      await until(async () => (await backend.inspect(name)) === null, {
        what: `round ${round}: the lock free again`,
      });
    }
  });

  it("a dead server's waiters leave the queue with its session; the next waiter goes first", async () => {
    const name = lockName('dead-server');
    const a = server();
    const doomed = server();
    const holder = await granted(a.backend, name, 'holder');
    const orphan = queued(doomed, name, 'orphan').catch((error: unknown) => error);
    await untilQueued(name, 1);
    const survivor = queued(a, name, 'survivor');
    await untilQueued(name, 2);
    // close() ends the session at once, as its expiry would after a crash.
    await doomed.backend.close();
    await orphan;
    await a.backend.release({ name, token: holder.token });
    expect((await survivor).owner).toBe('survivor');
  });

  it('a waiter whose node vanished while it slept queues again behind later waiters', async () => {
    const service = server();
    const { backend } = service;
    const name = lockName('vanished');
    const holder = await granted(backend, name, 'holder');
    const waiting = queued(service, name, 'sleeper');
    await untilQueued(name, 1);
    const [sleeperNode] = await waiters(name);
    const children = await rawCall<string[]>((done) =>
      raw().getChildren(paths.parent(name), (error, list) => done(error, list)),
    );
    const holderNode = children.find((child) => child.includes('-lock-'))!;
    // In one multi-op: the sleeper's node goes (as with an expired session), the lock is
    // released, and a later waiter queues. The sleeper is no longer queued, so it must queue
    // again behind the later waiter rather than take the free lock.
    const later = await rawCall<Array<{ path?: string }>>((done) =>
      raw()
        .transaction()
        .remove(`${paths.parent(name)}/${sleeperNode}`, -1)
        .setData(paths.parent(name), Buffer.from(`released:${holder.token}`), -1)
        .remove(`${paths.parent(name)}/${holderNode}`, -1)
        .create(
          `${paths.parent(name)}/raw-wait-`,
          Buffer.from('later'),
          CreateMode.EPHEMERAL_SEQUENTIAL,
        )
        .commit((error, results) => done(error, results)),
    );
    expect(await pendingAfter(waiting, 500)).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    await rawCall((done) => raw().remove(later[3]!.path!, -1, (error) => done(error)));
    expect((await waiting).owner).toBe('sleeper');
  });

  it('a grant whose lease ran out before its reply is never reported (S5), and is given back', async () => {
    // The waiter's server stalls as its grant is made: its clock jumps past the lease. Core's
    // loop checks every queue grant, so the wait fails (UNAVAILABLE) rather than hand out a
    // lease that is already over, and the lock goes back.
    let offsetMs = 0;
    let stalling = false;
    // Once stalling, every reading is a minute after the one before.
    const clock: Clock = {
      now: () => {
        if (stalling) offsetMs += 60_000;
        return systemClock.now() + offsetMs;
      },
      setTimer: (callback, delayMs) => systemClock.setTimer(callback, delayMs),
    };
    const holderSide = open();
    const service = server(open({ clock }));
    const name = lockName('s5');
    const holder = await granted(holderSide, name, 'holder');
    const waiting = failure(service.acquire({ name, owner: 'late', ttlMs: 1_000, waitMs: 60_000 }));
    await untilQueued(name, 1);
    expect(await pendingAfter(waiting, 200)).toBe(true);
    stalling = true;
    await holderSide.release({ name, token: holder.token });
    const error = await waiting;
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.details.indeterminate).toBe(true);
    await until(async () => (await holderSide.inspect(name)) === null, {
      what: 'the ran-out grant given back',
    });
    expect(await waiters(name)).toEqual([]);
  });

  it("a release hands an exclusive lock to this backend's shared head waiter, and the shared waiter behind joins it", async () => {
    const service = server();
    const { backend } = service;
    const name = lockName('hand-over-shared');
    const holder = await granted(backend, name, 'w');
    const permit = { ttlMs: 10_000, waitMs: 60_000, mode: 'shared', limit: 3 } as const;
    const s1 = service.acquire({ name, owner: 's1', ...permit });
    await untilQueued(name, 1);
    const s2 = service.acquire({ name, owner: 's2', ...permit });
    await untilQueued(name, 2);
    expect(await backend.release({ name, token: holder.token })).toBe(true);
    const [g1, g2] = await Promise.all([s1, s2]);
    expect(g1.token).toBeGreaterThan(holder.token);
    expect(g2.token).toBeGreaterThan(g1.token);
    expect((await backend.inspect(name))?.holders?.map((each) => each.owner)).toEqual(['s1', 's2']);
    expect(await waiters(name)).toEqual([]);
  });

  it("the release of a permit hands its room to this backend's shared head waiter in one write", async () => {
    const service = server();
    const { backend } = service;
    const other = open();
    const name = lockName('permit-hand-over');
    const shared = { ttlMs: 10_000, mode: 'shared', limit: 2 } as const;
    const p1 = await backend.tryAcquire({ name, owner: 'p1', ...shared });
    await other.tryAcquire({ name, owner: 'p2', ...shared });
    if (!p1.granted) throw new Error('expected p1 granted');
    const next = service.acquire({ name, owner: 'next', waitMs: 60_000, ...shared });
    await untilQueued(name, 1);
    // Asleep behind the holders: its look has answered.
    expect(await pendingAfter(next, 200)).toBe(true);
    const before = await lastZxid(raw(), prefix);
    expect(await backend.release({ name, token: p1.grant.token })).toBe(true);
    const lease = await next;
    // The release and the grant are one transaction (a release and the waiter's own grant
    // would be two, and the token one higher).
    expect(lease.token).toBe(before + 1n);
    expect((await other.inspect(name))?.holders?.map((each) => each.owner)).toEqual(['p2', 'next']);
    expect(await waiters(name)).toEqual([]);
  });
});
