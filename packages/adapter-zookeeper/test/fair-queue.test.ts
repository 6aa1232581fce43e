import { granted, lockName, pendingAfter, until } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { zookeeperAvailable } from '@dlm/test-services';
import { CreateMode } from 'node-zookeeper-client';
import { describe, expect, it } from 'vitest';
import { lockPaths } from '../src/zk-paths.js';
import { lastZxid, rawCall, useZooKeeper, waiterNodes } from './support.js';

const run = zookeeperAvailable();
const prefix = '/dlm-queue-test';
const paths = lockPaths(prefix);

describe.skipIf(!run)('zookeeper fair queue (acquireQueued)', () => {
  const { raw, open } = useZooKeeper(prefix);
  /** The waiter nodes of `name`'s queue, in queue order. */
  const waiters = (name: string) => waiterNodes(raw(), paths.parent(name));
  const untilQueued = (name: string, count: number) =>
    until(async () => (await waiters(name)).length >= count, {
      what: `${count} waiters in ${name}`,
    });
  const queued = (backend: LockBackend, name: string, owner: string, signal: AbortSignal) =>
    backend.acquireQueued!({ name, owner, ttlMs: 5_000, signal });

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
    const backend = open();
    const name = lockName('hand-over');
    const holder = await granted(backend, name, 'holder');
    const events: string[] = [];
    const unsubscribe = backend.watch(name, (event) => events.push(`${event.type}:${event.token}`));
    const waiting = queued(backend, name, 'next', new AbortController().signal);
    await untilQueued(name, 1);
    // Asleep at the head: its look has answered.
    expect(await pendingAfter(waiting, 200)).toBe(true);
    const before = await lastZxid(raw(), prefix);
    expect(await backend.release({ name, token: holder.token })).toBe(true);
    const result = await waiting;
    if (!result.granted) throw new Error('the head waiter was not granted');
    // The release and the grant are one transaction: a release and the waiter's own grant
    // would be two, and the token one higher.
    expect(result.grant.token).toBe(before + 1n);
    expect(await waiters(name)).toEqual([]);
    expect((await backend.inspect(name))?.owner).toBe('next');
    await until(() => events.length >= 2, { what: 'the release and the grant events' });
    expect(events).toEqual([`released:${holder.token}`, `acquired:${result.grant.token}`]);
    unsubscribe();
    expect(await backend.release({ name, token: result.grant.token })).toBe(true);
  });

  it("a release does not hand the lock to its own waiter while another server's is ahead", async () => {
    const [a, b] = [open(), open()];
    const name = lockName('no-local-favour');
    const holder = await granted(a, name, 'holder');
    const first = queued(b, name, 'remote-first', new AbortController().signal);
    await untilQueued(name, 1);
    const second = queued(a, name, 'local-second', new AbortController().signal);
    await untilQueued(name, 2);
    expect(await pendingAfter(second, 200)).toBe(true);
    await a.release({ name, token: holder.token });
    const result = await first;
    expect(result.granted && result.grant.owner).toBe('remote-first');
    expect(await pendingAfter(second, 200)).toBe(true);
    if (result.granted) await b.release({ name, token: result.grant.token });
    const next = await second;
    expect(next.granted && next.grant.owner).toBe('local-second');
  });

  it('a wait aborted while a release hands it the lock leaves the lock free', async () => {
    const backend = open();
    const name = lockName('hand-over-abort');
    for (let round = 0; round < 20; round++) {
      const holder = await granted(backend, name, `holder-${round}`);
      const abort = new AbortController();
      const waiting = queued(backend, name, `waiter-${round}`, abort.signal);
      await untilQueued(name, 1);
      await pendingAfter(waiting, 20 + round);
      // The abort lands before, during or after the release's hand-over.
      const release = backend.release({ name, token: holder.token });
      setTimeout(() => abort.abort(), round % 4);
      await release;
      const result = await waiting;
      if (result.granted) await backend.release({ name, token: result.grant.token });
      await until(async () => (await backend.inspect(name)) === null, {
        what: `round ${round}: the lock free again`,
      });
    }
  });

  it("a dead server's waiters leave the queue with its session; the next waiter goes first", async () => {
    const name = lockName('dead-server');
    const a = open();
    const doomed = open();
    const holder = await granted(a, name, 'holder');
    const orphan = queued(doomed, name, 'orphan', new AbortController().signal).catch(
      (error: unknown) => error,
    );
    await untilQueued(name, 1);
    const survivor = queued(a, name, 'survivor', new AbortController().signal);
    await untilQueued(name, 2);
    // close() ends the session at once, as its expiry would after a crash.
    await doomed.close();
    await orphan;
    await a.release({ name, token: holder.token });
    const result = await survivor;
    expect(result.granted && result.grant.owner).toBe('survivor');
  });

  it('a waiter whose node vanished while it slept queues again behind later waiters', async () => {
    const backend = open();
    const name = lockName('vanished');
    const holder = await granted(backend, name, 'holder');
    const waiting = queued(backend, name, 'sleeper', new AbortController().signal);
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
    const result = await waiting;
    expect(result.granted && result.grant.owner).toBe('sleeper');
  });
});
