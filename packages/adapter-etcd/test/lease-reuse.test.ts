import { sleep } from '@dlm/conformance';
import { createLockService } from '@dlm/core';
import { etcdAvailable } from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockNames, useEtcdBackend } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('lease-test');
const prefix = 'leases/';

describe.skipIf(!run)('etcd backend: leases of released locks are reused', () => {
  const env = useEtcdBackend(prefix);
  let raw: Etcd3;
  beforeAll(() => {
    raw = new Etcd3({ hosts: env.etcd.endpoints });
  });
  afterAll(() => raw?.close());

  const leaseOf = async (name: string) =>
    (await raw.get(`${prefix}lock/${name}`).exec()).kvs[0]?.lease;
  const remainingSeconds = async (id: string) =>
    Number((await raw.leaseClient.leaseTimeToLive({ ID: id })).TTL);
  const grant = async (name: string, ttlMs: number) => {
    const result = await env.backend.tryAcquire({ name, owner: 'o', ttlMs });
    if (!result.granted) throw new Error('expected a grant');
    return result.grant;
  };

  it("the next grant of the same TTL takes a released lock's lease, renewed to its full length, and it still runs out", async () => {
    const first = lockName('first');
    const a = await grant(first, 4_000);
    const lease = await leaseOf(first);
    expect(await env.backend.release({ name: first, token: a.token })).toBe(true);
    // Long enough to tell a renewed lease from the old one, short enough that 1.5 s (the
    // margin under which a lease is not reused) are left.
    await sleep(1_400);
    const second = lockName('second');
    const b = await grant(second, 4_000);
    expect(b.ttlMs).toBe(4_000);
    expect(await leaseOf(second)).toBe(lease);
    // Not renewed, about 2.5 s would be left (reported as 2): the keepalive restarted 4 s.
    expect(await remainingSeconds(lease!)).toBeGreaterThanOrEqual(3);
    // Nothing keeps it alive after that: the lock ends with its lease.
    const started = performance.now();
    while ((await env.backend.inspect(second)) && performance.now() - started < 5_000)
      await sleep(100);
    expect(await env.backend.inspect(second)).toBeNull();
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('a pooled lease that is gone (revoked, ran out) is not reused: the grant takes a new one', async () => {
    const first = lockName('revoked');
    const a = await grant(first, 4_000);
    const lease = await leaseOf(first);
    expect(await env.backend.release({ name: first, token: a.token })).toBe(true);
    await raw.leaseClient.leaseRevoke({ ID: lease! });
    const second = lockName('after-revoke');
    const b = await grant(second, 4_000);
    const next = await leaseOf(second);
    expect(next).toBeDefined();
    expect(next).not.toBe(lease);
    expect((await env.backend.inspect(second))?.token).toBe(b.token);
    expect(await env.backend.release({ name: second, token: b.token })).toBe(true);
  });

  it('a lease is not shared: a lock held when another is released keeps its own lease', async () => {
    const held = lockName('held');
    const other = lockName('other');
    const h = await grant(held, 5_000);
    const o = await grant(other, 5_000);
    const heldLease = await leaseOf(held);
    expect(await env.backend.release({ name: other, token: o.token })).toBe(true);
    const third = lockName('third');
    const t = await grant(third, 5_000);
    expect(await leaseOf(third)).not.toBe(heldLease);
    expect(await env.backend.release({ name: third, token: t.token })).toBe(true);
    expect((await env.backend.inspect(held))?.token).toBe(h.token);
    expect(await env.backend.release({ name: held, token: h.token })).toBe(true);
  });

  /** The lock is held with `token` on a live lease other than `dead`, and releases. */
  const expectOnNewLease = async (name: string, token: bigint, dead: string | undefined) => {
    const lease = await leaseOf(name);
    expect(lease).toBeDefined();
    expect(lease).not.toBe(dead);
    expect(await remainingSeconds(lease!)).toBeGreaterThanOrEqual(3);
    expect((await env.backend.inspect(name))?.token).toBe(token);
    expect(await env.backend.release({ name, token })).toBe(true);
  };

  /** A wait through a dlm server over the test's backend (core's loop over etcd's queue). */
  const waitFor = (name: string, owner: string) =>
    createLockService({ backend: env.backend }).acquire({
      name,
      owner,
      ttlMs: 4_000,
      waitMs: 30_000,
    });

  /** Pools a lease of `ttlMs` (a grant released) and revokes it behind the backend's back. */
  const pooledThenRevoked = async (ttlMs: number) => {
    const name = lockName('pooled');
    const a = await grant(name, ttlMs);
    const lease = await leaseOf(name);
    expect(await env.backend.release({ name, token: a.token })).toBe(true);
    await raw.leaseClient.leaseRevoke({ ID: lease! });
    return lease!;
  };

  it('a waiter at the head whose pooled lease is gone (sent with its renewal) is granted on a new lease', async () => {
    const name = lockName('head');
    // Held by someone else on no lease, so the waiter sleeps at the head; freed without a dlm
    // release, so the released lock's lease does not go to the pool ahead of the revoked one.
    await raw.put(`${prefix}lock/${name}`).value('other');
    const dead = await pooledThenRevoked(4_000);
    const waiting = waitFor(name, 'b');
    await sleep(300);
    await raw.delete().key(`${prefix}lock/${name}`);
    const lease = await waiting;
    expect(lease.ttlMs).toBe(4_000);
    await expectOnNewLease(name, lease.token, dead);
  });

  it('a waited acquire of a free lock whose pooled lease is gone is granted on a new lease', async () => {
    const name = lockName('free');
    const dead = await pooledThenRevoked(4_000);
    await expectOnNewLease(name, (await waitFor(name, 'c')).token, dead);
  });
});
