import { failure, sleep, until } from '@dlm/conformance';
import type { LockEvent } from '@dlm/core';
import { etcdAvailable, etcdManaged } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';
import { etcdBackend } from '../src/index.js';
import { lockNames, useEtcdBackend } from './support.js';

const run = etcdAvailable();
const lockName = lockNames('etcd-test');

describe.skipIf(!run)('etcd backend primitives', () => {
  const env = useEtcdBackend('test/');

  it('declares strict fencing in whole seconds, a fair queue, shared modes and lock-delays', () => {
    expect(env.backend.kind).toBe('etcd');
    expect(env.backend.capabilities).toMatchObject({
      fencing: 'strict',
      ttlGranularityMs: 1_000,
      minTtlMs: 1_000,
      durableAcrossRestart: true,
      expiryEvents: true,
      fairQueue: true,
      sharedModes: true,
      lockDelay: true,
    });
  });

  it('reports the lease etcd granted: the TTL rounded up to whole seconds', async () => {
    const result = await env.backend.tryAcquire({
      name: lockName('ttl'),
      owner: 'a',
      ttlMs: 1_500,
    });
    expect(result.granted && result.grant.ttlMs).toBe(2_000);
  });

  it('tokens are the key create revisions: strictly increasing, same for the same owner', async () => {
    const name = lockName('tokens');
    const other = lockName('tokens-other');
    let last = 0n;
    for (let i = 0; i < 10; i += 1) {
      const result = await env.backend.tryAcquire({ name, owner: `o${i}`, ttlMs: 5_000 });
      if (!result.granted) throw new Error('expected a grant');
      expect(result.grant.token).toBeGreaterThan(last);
      last = result.grant.token;
      // A write elsewhere moves the revision on between grants.
      const unrelated = await env.backend.tryAcquire({ name: other, owner: `x${i}`, ttlMs: 5_000 });
      if (unrelated.granted)
        await env.backend.release({ name: other, token: unrelated.grant.token });
      // The same owner again: the same token (idempotent), the lease refreshed.
      const again = await env.backend.tryAcquire({ name, owner: `o${i}`, ttlMs: 5_000 });
      expect(again.granted && again.grant.token).toBe(last);
      expect((await env.backend.inspect(name))?.token).toBe(last);
      expect(await env.backend.release({ name, token: last })).toBe(true);
    }
  });

  it('a held lock reports who holds it and an upper bound of its remaining lease', async () => {
    const name = lockName('held');
    await env.backend.tryAcquire({ name, owner: 'holder', ttlMs: 5_000 });
    const result = await env.backend.tryAcquire({ name, owner: 'other', ttlMs: 5_000 });
    expect(result.granted).toBe(false);
    if (result.granted) return;
    expect(result.ttlRemainingMs).toBeGreaterThan(3_000);
    expect(result.ttlRemainingMs).toBeLessThanOrEqual(5_000);
    expect(await env.backend.inspect(name)).toMatchObject({ owner: 'holder' });
  });

  it('extend moves the lock to a lease of the new length and keeps its token', async () => {
    const name = lockName('extend');
    const first = await env.backend.tryAcquire({ name, owner: 'a', ttlMs: 1_000 });
    if (!first.granted) throw new Error('expected a grant');
    const extended = await env.backend.extend({ name, token: first.grant.token, ttlMs: 6_000 });
    expect(extended).toMatchObject({ token: first.grant.token, owner: 'a', ttlMs: 6_000 });
    await sleep(2_000);
    const state = await env.backend.inspect(name);
    expect(state?.token).toBe(first.grant.token);
    expect(state?.ttlRemainingMs).toBeGreaterThan(2_000);
    expect(
      await env.backend.extend({ name, token: first.grant.token + 1n, ttlMs: 6_000 }),
    ).toBeNull();
  });

  it('watch tells grants, releases, revocations and expiries apart', async () => {
    const name = lockName('events');
    const events: LockEvent[] = [];
    const stop = env.backend.watch(name, (event) => events.push(event));
    const a = await env.backend.tryAcquire({ name, owner: 'a', ttlMs: 5_000 });
    if (!a.granted) throw new Error('expected a grant');
    await env.backend.release({ name, token: a.grant.token });
    const b = await env.backend.tryAcquire({ name, owner: 'b', ttlMs: 5_000 });
    if (!b.granted) throw new Error('expected a grant');
    expect(await env.backend.revoke!(name)).toBe(true);
    const c = await env.backend.tryAcquire({ name, owner: 'c', ttlMs: 1_000 });
    if (!c.granted) throw new Error('expected a grant');
    await until(() => events.length >= 6, 4_000);
    stop();
    expect(events).toEqual([
      { name, type: 'acquired', token: a.grant.token, owner: 'a', mode: 'exclusive' },
      { name, type: 'released', token: a.grant.token, owner: 'a' },
      { name, type: 'acquired', token: b.grant.token, owner: 'b', mode: 'exclusive' },
      { name, type: 'revoked', token: b.grant.token, owner: 'b' },
      { name, type: 'acquired', token: c.grant.token, owner: 'c', mode: 'exclusive' },
      { name, type: 'expired', token: c.grant.token, owner: 'c' },
    ]);
  });

  it('list returns the held locks under a name prefix', async () => {
    const base = lockName('list');
    await env.backend.tryAcquire({ name: `${base}/1`, owner: 'a', ttlMs: 5_000 });
    await env.backend.tryAcquire({ name: `${base}/2`, owner: 'b', ttlMs: 5_000 });
    await env.backend.tryAcquire({ name: `${base}x`, owner: 'c', ttlMs: 5_000 });
    const listed = await env.backend.list!(`${base}/`);
    expect(listed.map((state) => state.owner).sort()).toEqual(['a', 'b']);
  });

  it.skipIf(!etcdManaged())(
    'a stalled etcd gives UNAVAILABLE within commandTimeoutMs, then serves again',
    async () => {
      const quick = etcdBackend({
        endpoints: env.etcd.endpoints,
        minTtlMs: 1_000,
        commandTimeoutMs: 500,
      });
      try {
        const name = lockName('stall');
        expect((await quick.tryAcquire({ name, owner: 'a', ttlMs: 5_000 })).granted).toBe(true);
        const member = env.etcd.members[0]!;
        member.process.pause();
        const started = performance.now();
        const stalled = quick.tryAcquire({ name: lockName('stalled'), owner: 'b', ttlMs: 5_000 });
        const error = await failure(stalled).finally(() => member.process.resume());
        const elapsed = performance.now() - started;
        expect(error.code).toBe('UNAVAILABLE');
        expect(elapsed).toBeLessThan(900);
        expect((await quick.inspect(name))?.owner).toBe('a');
      } finally {
        await quick.close();
      }
    },
  );
});
