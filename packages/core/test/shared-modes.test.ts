import { describe, expect, it } from 'vitest';
import type { LockBackend, LockEvent } from '../src/backend.js';
import { createManualClock, type ManualClock } from '../src/clock.js';
import { createLeaseKey } from '../src/lease-key.js';
import {
  createLockService,
  type Lease,
  type LockChange,
  type LockService,
  type LostEvent,
} from '../src/lock-service.js';
import { failure, queueOver, serviceScope, settle, settledFlag } from './service-scope.js';

/** Whether `promise` has settled, after letting the service and the backend run. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  const done = settledFlag(promise);
  await settle();
  return done();
}

/** The embedded backend as one without expiry events sees it: core checks each lease itself. */
function withoutExpiryEvents(real: LockBackend): LockBackend {
  return {
    ...real,
    capabilities: { ...real.capabilities, expiryEvents: false },
    watch: (name, listener) =>
      real.watch(name, (event: LockEvent) => {
        if (event.type !== 'expired') listener(event);
      }),
  };
}

describe('shared modes through the lock service', () => {
  const openService = serviceScope();
  let clock: ManualClock;
  let service: LockService;

  async function open(wrap?: (backend: LockBackend) => LockBackend) {
    clock = createManualClock(1_000);
    service = await openService({ clock }, wrap);
  }

  const shared = (name: string, owner: string, limit?: number, extra: object = {}) =>
    service.acquire({
      name,
      owner,
      ttlMs: 10_000,
      mode: 'shared',
      ...(limit === undefined ? {} : { limit }),
      ...extra,
    });
  const exclusive = (name: string, owner: string, extra: object = {}) =>
    service.acquire({ name, owner, ttlMs: 10_000, ...extra });

  it('grants shared holders up to the limit, then refuses the next one and any exclusive', async () => {
    await open();
    const a = await shared('s', 'a', 2);
    const b = await shared('s', 'b', 2);
    expect([a.mode, a.limit, b.mode, b.limit]).toEqual(['shared', 2, 'shared', 2]);
    expect(b.token).toBeGreaterThan(a.token);
    expect((await failure(shared('s', 'c', 2))).code).toBe('LOCK_HELD');
    expect((await failure(exclusive('s', 'x'))).code).toBe('LOCK_HELD');
    const state = await service.get('s');
    expect(state).toMatchObject({ mode: 'shared', limit: 2, token: b.token, owner: 'b' });
    expect(state?.holders?.map((holder) => holder.owner)).toEqual(['a', 'b']);
    // A release ends that holder only: room for one more.
    await service.release({ name: 's', token: a.token });
    expect(service.holds('s', a.token)).toBe(false);
    expect(service.holds('s', b.token)).toBe(true);
    const c = await shared('s', 'c', 2);
    expect(c.token).toBeGreaterThan(b.token);
  });

  it('gets a read lock (the maxHolders limit) by default, and an exclusive lock beside none', async () => {
    await open();
    const read = await shared('r', 'a');
    expect(read.limit).toBe(service.limits.maxHolders);
    await shared('r', 'b');
    await shared('r', 'c');
    expect((await service.get('r'))?.holders).toHaveLength(3);
    const x = await exclusive('x', 'w');
    expect(x.mode).toBe('exclusive');
    expect(x.limit).toBeUndefined();
    expect((await failure(shared('x', 'r'))).code).toBe('LOCK_HELD');
  });

  it('fills mode and holders in get() for an exclusive lock', async () => {
    await open();
    const x = await exclusive('g', 'w');
    expect(await service.get('g')).toMatchObject({
      mode: 'exclusive',
      token: x.token,
      holders: [{ owner: 'w', token: x.token }],
    });
  });

  it('gives every grant a token above every earlier one, across modes', async () => {
    await open();
    const tokens: bigint[] = [];
    const r1 = await shared('t', 'a', 3);
    const r2 = await shared('t', 'b', 3);
    tokens.push(r1.token, r2.token);
    await service.release({ name: 't', token: r1.token });
    await service.release({ name: 't', token: r2.token });
    const w = await exclusive('t', 'w');
    tokens.push(w.token);
    await service.release({ name: 't', token: w.token });
    tokens.push((await shared('t', 'c', 3)).token);
    expect([...tokens].sort((x, y) => (x < y ? -1 : 1))).toEqual(tokens);
    expect(new Set(tokens).size).toBe(tokens.length);
  });

  it('answers a request in the other mode by the same holder with INVALID_PARAMS (mode)', async () => {
    await open();
    const leaseKey = 'k'.repeat(22);
    const r = await shared('m', 'x', 3, { leaseKey });
    for (const waitMs of [0, 5_000]) {
      const error = await failure(exclusive('m', 'x', { leaseKey, waitMs }));
      expect(error.code).toBe('INVALID_PARAMS');
      expect(error.details.field).toBe('mode');
      expect(error.message).toContain('holds "m" in mode shared');
    }
    // The holder's own lease is untouched, and re-acquiring it the same way is idempotent.
    expect(service.holds('m', r.token)).toBe(true);
    expect((await shared('m', 'x', 3, { leaseKey })).token).toBe(r.token);
  });

  it('answers a shared request with another limit with INVALID_PARAMS (limit, the holders’ limit)', async () => {
    await open();
    await shared('l', 'a', 4);
    for (const waitMs of [0, 5_000]) {
      const error = await failure(shared('l', 'b', 3, { waitMs }));
      expect(error.code).toBe('INVALID_PARAMS');
      expect(error.details).toMatchObject({ field: 'limit', limit: 4 });
      expect(error.message).toContain("limit 3 differs from the holders' limit 4");
    }
  });

  it('serves both modes in one FIFO queue: S, S, X, S — the last S waits for X', async () => {
    await open();
    const s1 = await shared('f', 's1', 5);
    const s2 = await shared('f', 's2', 5);
    const x = exclusive('f', 'x', { waitMs: 60_000 });
    await settle();
    const s3 = shared('f', 's3', 5, { waitMs: 60_000 });
    expect(await settled(s3)).toBe(false);
    expect(service.waiters('f')).toBe(2);
    // A try-lock does not jump the queue, though the name has room for a shared holder.
    expect((await failure(shared('f', 's4', 5))).code).toBe('LOCK_HELD');
    // Except a holder's own re-acquire: the same lease, refreshed.
    expect((await shared('f', 's1', 5)).token).toBe(s1.token);
    await service.release({ name: 'f', token: s1.token });
    expect(await settled(x)).toBe(false);
    await service.release({ name: 'f', token: s2.token });
    const writer = await x;
    expect(writer.token).toBeGreaterThan(s2.token);
    expect(await settled(s3)).toBe(false);
    await service.release({ name: 'f', token: writer.token });
    const reader = await s3;
    expect(reader.token).toBeGreaterThan(writer.token);
  });

  it('wakes an exclusive waiter when the last shared holder expires', async () => {
    await open();
    const r1 = await service.acquire({ name: 'x', owner: 'a', ttlMs: 1_000, mode: 'shared' });
    await service.acquire({ name: 'x', owner: 'b', ttlMs: 2_000, mode: 'shared' });
    const writer = exclusive('x', 'w', { waitMs: 60_000 });
    clock.advance(1_200);
    expect(await settled(writer)).toBe(false);
    clock.advance(1_000);
    expect((await writer).token).toBeGreaterThan(r1.token);
  });

  it('grants a run of shared waiters together when the exclusive holder leaves', async () => {
    await open();
    const w = await exclusive('run', 'w');
    const readers = ['a', 'b', 'c'].map((owner) => shared('run', owner, 3, { waitMs: 60_000 }));
    const late = shared('run', 'd', 3, { waitMs: 60_000 });
    await settle();
    await service.release({ name: 'run', token: w.token });
    const granted = await Promise.all(readers);
    expect(granted.map((lease) => lease.owner)).toEqual(['a', 'b', 'c']);
    // The fourth is past the limit: it waits for one of them.
    expect(await settled(late)).toBe(false);
    await service.release({ name: 'run', token: granted[1]!.token });
    expect((await late).owner).toBe('d');
  });

  it('fails a waiter whose request conflicts at once, and goes on serving the next', async () => {
    await open();
    const w = await exclusive('c', 'w');
    const b = shared('c', 'b', 3, { waitMs: 60_000 });
    const c = failure(shared('c', 'c', 4, { waitMs: 60_000 }));
    const d = shared('c', 'd', 3, { waitMs: 60_000 });
    await settle();
    await service.release({ name: 'c', token: w.token });
    expect((await b).owner).toBe('b');
    expect((await c).details).toMatchObject({ field: 'limit', limit: 3 });
    expect((await d).owner).toBe('d');
    expect(service.waiters('c')).toBe(0);
  });

  it('reports every grant and end to watchers, with the holders count', async () => {
    await open();
    const changes: LockChange[] = [];
    service.watch('w', (change) => changes.push(change));
    await settle();
    const a = await shared('w', 'a', 3);
    const b = await shared('w', 'b', 3);
    await settle();
    await service.release({ name: 'w', token: a.token });
    await service.release({ name: 'w', token: b.token });
    const x = await exclusive('w', 'x');
    await settle();
    await service.release({ name: 'w', token: x.token });
    await settle();
    expect(
      changes.map(({ type, token, mode, holders, held }) => [type, token, mode, holders, held]),
    ).toEqual([
      ['acquired', a.token, 'shared', 1, true],
      ['acquired', b.token, 'shared', 2, true],
      ['released', a.token, 'shared', 1, true],
      ['released', b.token, 'shared', 0, false],
      ['acquired', x.token, 'exclusive', 1, true],
      ['released', x.token, 'exclusive', 0, false],
    ]);
  });

  for (const [what, wrap] of [
    ['with expiry events', undefined],
    ['on a backend without expiry events', withoutExpiryEvents],
  ] as const) {
    it(`tells one shared holder lock.lost on its expiry, leaving the other (${what})`, async () => {
      await open(wrap);
      const lost: LostEvent[] = [];
      const changes: LockChange[] = [];
      const onLost = (event: LostEvent) => lost.push(event);
      const short = await service.acquire({
        name: 'e',
        owner: 'a',
        ttlMs: 1_000,
        mode: 'shared',
        limit: 2,
        onLost,
      });
      const long = await service.acquire({
        name: 'e',
        owner: 'b',
        ttlMs: 60_000,
        mode: 'shared',
        limit: 2,
        onLost,
      });
      service.watch('e', (change) => changes.push(change));
      await settle();
      clock.advance(1_500);
      await settle();
      clock.advance(500);
      await settle();
      expect(lost).toEqual([{ name: 'e', token: short.token, reason: 'expired' }]);
      expect(service.holds('e', short.token)).toBe(false);
      expect(service.holds('e', long.token)).toBe(true);
      const ends = changes.filter((change) => change.type === 'expired');
      expect(ends).toEqual([
        expect.objectContaining({ token: short.token, held: true, holders: 1 }),
      ]);
      expect((await service.get('e'))?.holders?.map((holder) => holder.token)).toEqual([
        long.token,
      ]);
    });
  }

  it('extends a shared lease granted through another service as shared, with its limit', async () => {
    let backend: LockBackend | undefined;
    await open((real) => {
      backend = real;
      return real;
    });
    const other = createLockService({ backend: backend!, clock });
    try {
      const leaseKey = createLeaseKey();
      const lease = await shared('x', 'a', 3, { leaseKey });
      await shared('x', 'b', 3);
      const extended = await other.extend({
        name: 'x',
        token: lease.token,
        ttlMs: 20_000,
        leaseKey,
      });
      expect(extended).toMatchObject({
        token: lease.token,
        mode: 'shared',
        limit: 3,
        ttlMs: 20_000,
      });
      expect(other.holds('x', lease.token)).toBe(true);
    } finally {
      await other.close();
    }
  });

  it('follows shared holders granted through another service, and finds each one’s expiry itself', async () => {
    let backend: LockBackend | undefined;
    await open((real) => {
      backend = withoutExpiryEvents(real);
      return backend;
    });
    const other = createLockService({ backend: backend!, clock });
    try {
      const changes: LockChange[] = [];
      other.watch('o', (change) => changes.push(change));
      await settle();
      const short = await service.acquire({
        name: 'o',
        owner: 'a',
        ttlMs: 1_000,
        mode: 'shared',
        limit: 3,
      });
      const long = await service.acquire({
        name: 'o',
        owner: 'b',
        ttlMs: 60_000,
        mode: 'shared',
        limit: 3,
      });
      await settle();
      // To the check just past the short lease's deadline (2,001 ms): a jump further would have
      // the check's answer, counted at 2,001, read at a later clock, which looks like an extend.
      clock.advance(1_001);
      await settle();
      clock.advance(500);
      await settle();
      await service.release({ name: 'o', token: long.token });
      await settle();
      expect(changes.map(({ type, token, holders, held }) => [type, token, holders, held])).toEqual(
        [
          ['acquired', short.token, 1, true],
          ['acquired', long.token, 2, true],
          ['expired', short.token, 1, true],
          ['released', long.token, 0, false],
        ],
      );
    } finally {
      await other.close();
    }
  });

  for (const [what, wrap] of [
    ['the backend’s revoke', undefined],
    [
      'a release of each holder',
      (real: LockBackend): LockBackend => {
        const { revoke: _revoke, ...rest } = real;
        return rest;
      },
    ],
  ] as const) {
    it(`revoke ends every holder, each told lock.lost (${what})`, async () => {
      await open(wrap);
      const lost: bigint[] = [];
      const onLost = (event: LostEvent) => lost.push(event.token);
      const leases: Lease[] = [];
      for (const owner of ['a', 'b', 'c']) {
        leases.push(await shared('v', owner, 3, { onLost }));
      }
      const revoked = await service.revoke('v');
      expect(revoked?.holders).toHaveLength(3);
      expect(await service.get('v')).toBeNull();
      expect(lost.sort()).toEqual(leases.map((lease) => lease.token));
      for (const lease of leases) expect(service.holds('v', lease.token)).toBe(false);
    });
  }

  it('acquires a set with a shared entry beside an exclusive one', async () => {
    await open();
    const reader = await shared('set:a', 'other', 3);
    const leases = await service.acquireAll({
      locks: [{ name: 'set:a', mode: 'shared', limit: 3 }, { name: 'set:b' }],
      owner: 'set',
      ttlMs: 10_000,
    });
    expect(leases.map((lease) => [lease.name, lease.mode])).toEqual([
      ['set:a', 'shared'],
      ['set:b', 'exclusive'],
    ]);
    expect((await service.get('set:a'))?.holders?.map((holder) => holder.owner)).toEqual([
      'other',
      'set',
    ]);
    expect(service.holds('set:a', reader.token)).toBe(true);
    // An exclusive entry on a name held shared fails the whole set.
    const error = await failure(
      service.acquireAll({
        locks: [{ name: 'set:c' }, { name: 'set:a' }],
        owner: 'x',
        ttlMs: 10_000,
      }),
    );
    expect(error.code).toBe('LOCK_HELD');
    expect(await service.get('set:c')).toBeNull();
  });

  it('maps a conflict from the backend’s own queue to INVALID_PARAMS, and grants shared there', async () => {
    // The embedded backend behind a queue of its own (fairQueue): a wait asks it until granted,
    // refused as asked (conflict), or aborted at its deadline, woken by its releases.
    service = await openService({}, (real) => ({
      ...real,
      capabilities: { ...real.capabilities, fairQueue: true },
      queue: queueOver(real),
    }));
    const w = await exclusive('q', 'w');
    const reader = shared('q', 'r', 4, { waitMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    await service.release({ name: 'q', token: w.token });
    expect(await reader).toMatchObject({ mode: 'shared', limit: 4, owner: 'r' });
    const error = await failure(shared('q', 'b', 3, { waitMs: 5_000 }));
    expect(error.details).toMatchObject({ field: 'limit', limit: 4 });
    expect(service.waiters('q')).toBe(0);
  });

  it('refuses shared requests on a backend without sharedModes, before calling it', async () => {
    await open((real) => ({ ...real, capabilities: { ...real.capabilities, sharedModes: false } }));
    const error = await failure(shared('n', 'a', 2));
    expect(error.details.field).toBe('mode');
    expect(await service.get('n')).toBeNull();
  });
});
