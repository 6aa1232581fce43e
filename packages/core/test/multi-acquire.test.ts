import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/errors.js';
import type { Lease, LockService } from '../src/lock-service.js';
import { failure, serviceScope } from './service-scope.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function heldBy(service: LockService, names: string[]): Promise<(string | null)[]> {
  return Promise.all(names.map(async (name) => (await service.get(name))?.owner ?? null));
}

/**
 * `other` holds `${prefix}:b`; the set `${prefix}:a` + `${prefix}:b` is asked for (waiting up to
 * 5 s) and has been granted `:a` when this resolves.
 */
async function setBehindHolder(
  service: LockService,
  prefix: string,
  ttlMs: number,
  signal?: AbortSignal,
): Promise<{ other: Lease; set: Promise<Lease[]> }> {
  const other = await service.acquire({ name: `${prefix}:b`, owner: 'other', ttlMs: 5_000 });
  const set = service.acquireAll({
    locks: [{ name: `${prefix}:a` }, { name: `${prefix}:b` }],
    owner: 'set',
    ttlMs,
    waitMs: 5_000,
    ...(signal ? { signal } : {}),
  });
  await sleep(50);
  return { other, set };
}

describe('acquireAll', () => {
  const openService = serviceScope();

  it('grants every lock of the set, in request order, each with its own token', async () => {
    const service = await openService();
    const leases = await service.acquireAll({
      locks: [{ name: 'm:c' }, { name: 'm:a' }, { name: 'm:b', mode: 'exclusive' }],
      owner: 'set',
      ttlMs: 5_000,
    });
    expect(leases.map((lease) => lease.name)).toEqual(['m:c', 'm:a', 'm:b']);
    expect(leases.every((lease) => lease.owner === 'set' && lease.mode === 'exclusive')).toBe(true);
    expect(new Set(leases.map((lease) => lease.token)).size).toBe(3);
    expect(await heldBy(service, ['m:a', 'm:b', 'm:c'])).toEqual(['set', 'set', 'set']);
  });

  it('all or nothing: one lock held elsewhere fails the set, naming it, and frees the rest', async () => {
    const service = await openService();
    await service.acquire({ name: 'n:b', owner: 'other', ttlMs: 5_000 });
    const error = await failure(
      service.acquireAll({
        locks: [{ name: 'n:a' }, { name: 'n:b' }, { name: 'n:c' }],
        owner: 'set',
        ttlMs: 5_000,
        waitMs: 100,
      }),
    );
    expect(isDlmError(error, 'LOCK_HELD')).toBe(true);
    expect((error as { details: { name?: string } }).details.name).toBe('n:b');
    // n:a was granted before n:b was waited for; it is free again, and n:c was never taken.
    expect(await heldBy(service, ['n:a', 'n:b', 'n:c'])).toEqual([null, 'other', null]);
  });

  it('waits for a held lock and is granted the whole set once it is released', async () => {
    const service = await openService();
    const { other, set } = await setBehindHolder(service, 'w', 5_000);
    await service.release({ name: 'w:b', token: other.token });
    const leases = await set;
    expect(leases.map((lease) => lease.owner)).toEqual(['set', 'set']);
    expect(leases[1]!.token).toBeGreaterThan(other.token);
  });

  it('never deadlocks: concurrent sets over the same names in opposite orders all finish', async () => {
    const service = await openService();
    const names = ['d:1', 'd:2', 'd:3', 'd:4'];
    const rounds = Array.from({ length: 12 }, async (_, i) => {
      const order = i % 2 ? [...names].reverse() : names;
      const leases = await service.acquireAll({
        locks: order.map((name) => ({ name })),
        owner: `c${i}`,
        ttlMs: 5_000,
        waitMs: 10_000,
      });
      await sleep(2);
      for (const lease of leases) await service.release(lease);
      return leases.length;
    });
    expect(await Promise.all(rounds)).toEqual(Array(12).fill(4));
  });

  it('keeps the leases it holds alive while it waits for the rest', async () => {
    const service = await openService();
    const { other, set } = await setBehindHolder(service, 'k', 300);
    const first = await service.get('k:a');
    expect(first?.owner).toBe('set');
    // Three TTLs later k:a is still the set's, with the same token.
    await sleep(900);
    expect((await service.get('k:a'))?.token).toBe(first?.token);
    await service.release({ name: 'k:b', token: other.token });
    const leases = await set;
    expect(leases[0]!.token).toBe(first?.token);
    // Extended when the set completed: the early lease runs about a full TTL from now.
    expect((await service.get('k:a'))!.ttlRemainingMs).toBeGreaterThan(200);
  });

  it('fails when a lease it holds ends while it waits, naming that lock, and frees the set', async () => {
    const service = await openService();
    const { set } = await setBehindHolder(service, 'r', 300);
    await service.revoke('r:a');
    const error = await failure(set);
    expect(isDlmError(error, 'LOCK_HELD')).toBe(true);
    expect((error as { details: { name?: string } }).details.name).toBe('r:a');
    expect(await heldBy(service, ['r:a', 'r:b'])).toEqual([null, 'other']);
  });

  it('a cancelled wait gives back what it was granted', async () => {
    const service = await openService();
    const controller = new AbortController();
    const { set } = await setBehindHolder(service, 'x', 5_000, controller.signal);
    controller.abort();
    const error = await failure(set);
    expect(isDlmError(error, 'CANCELLED')).toBe(true);
    expect((error as { details: { name?: string } }).details.name).toBe('x:b');
    expect(await heldBy(service, ['x:a'])).toEqual([null]);
  });

  it('the same owner and key sent again get the same leases back', async () => {
    const service = await openService();
    const request = {
      locks: [{ name: 'i:a' }, { name: 'i:b' }],
      owner: 'set',
      ttlMs: 5_000,
      leaseKey: 'k'.repeat(22),
    };
    const first = await service.acquireAll(request);
    const again = await service.acquireAll(request);
    expect(again.map((lease: Lease) => lease.token)).toEqual(first.map((lease) => lease.token));
  });

  it.each([
    ['no locks', [], 'locks', /1-64 locks/],
    ['too many', Array.from({ length: 65 }, (_, i) => ({ name: `t:${i}` })), 'locks', /1-64/],
    ['a name twice', [{ name: 'v:a' }, { name: 'v:a' }], 'locks', /more than once/],
    ['an entry that is not an object', ['v:a'], 'locks', /\[0\] must be an object/],
    ['a bad name', [{ name: 'v:a' }, { name: '' }], 'name', /locks\[1\]\.name/],
    ['an unknown mode', [{ name: 'v:a', mode: 'read' }], 'mode', /locks\[0\]\.mode/],
    ['a limit', [{ name: 'v:a', limit: 2 }], 'limit', /only for mode "shared"/],
  ])('refuses %s (INVALID_PARAMS, field %s)', async (_, locks, field, message) => {
    const service = await openService();
    const error = await failure(
      service.acquireAll({ locks: locks as never, owner: 'set', ttlMs: 5_000 }),
    );
    expect(isDlmError(error, 'INVALID_PARAMS')).toBe(true);
    expect((error as { details: { field?: string } }).details.field).toBe(field);
    expect((error as Error).message).toMatch(message);
    // Nothing was taken.
    expect(await service.get('v:a')).toBeNull();
  });

  it('acquire takes mode exclusive, and refuses a limit, and shared where the backend has no shared modes', async () => {
    const service = await openService({}, (real) => ({
      ...real,
      capabilities: { ...real.capabilities, sharedModes: false },
    }));
    const lease = await service.acquire({
      name: 'e:a',
      owner: 'o',
      ttlMs: 5_000,
      mode: 'exclusive',
    });
    expect(lease.mode).toBe('exclusive');
    const shared = await failure(
      service.acquire({ name: 'e:b', owner: 'o', ttlMs: 5_000, mode: 'shared' }),
    );
    expect((shared as { details: { field?: string } }).details.field).toBe('mode');
    const limit = await failure(
      service.acquire({ name: 'e:b', owner: 'o', ttlMs: 5_000, limit: 3 }),
    );
    expect((limit as { details: { field?: string } }).details.field).toBe('limit');
  });
});
