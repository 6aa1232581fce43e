import { lockName, until } from '@dlm/conformance';
import type { AcquireRequest, AcquireResult, Grant, LockEvent } from '@dlm/core';
import { type RedisService, redisAvailable, startRedisNodes } from '@dlm/test-services';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RedlockBackend, redlockBackend } from '../src/index.js';

const enabled = redisAvailable();

/** Shared holders on a quorum of three real Redis nodes, through two Redlock backends. */
describe.skipIf(!enabled)('redlock shared modes, 3 nodes', () => {
  let nodes: RedisService[] = [];
  beforeAll(async () => {
    nodes = await startRedisNodes(3);
  });
  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop(1_000)));
  });
  const opened: RedlockBackend[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((backend) => backend.close()));
  });
  const server = async () => {
    const backend = redlockBackend({ urls: nodes.map((node) => node.url) });
    opened.push(backend);
    await backend.ready();
    return backend;
  };
  const shared = (name: string, owner: string, limit: number, more: Partial<AcquireRequest> = {}) =>
    ({
      name,
      owner,
      ttlMs: 10_000,
      mode: 'shared',
      limit,
      keyHash: `k-${owner}`,
      ...more,
    }) as const;
  const granted = (result: AcquireResult): Grant => {
    if (!result.granted) throw new Error(`expected a grant, got ${JSON.stringify(result)}`);
    return result.grant;
  };

  it('declares sharedModes with best-effort fencing', async () => {
    const backend = await server();
    expect(backend.capabilities).toMatchObject({ sharedModes: true, fencing: 'best-effort' });
  });

  it('grants shared holders up to the limit, refuses an exclusive one beside them', async () => {
    const backend = await server();
    const name = lockName('rl-sh-limit');
    const a = granted(await backend.tryAcquire(shared(name, 'a', 2)));
    const b = granted(await backend.tryAcquire(shared(name, 'b', 2)));
    expect(b.token).toBeGreaterThan(a.token);
    expect((await backend.tryAcquire(shared(name, 'c', 2))).granted).toBe(false);
    expect(
      (await backend.tryAcquire({ name, owner: 'x', ttlMs: 10_000, keyHash: 'k-x' })).granted,
    ).toBe(false);
    const state = await backend.inspect(name);
    expect(state).toMatchObject({ mode: 'shared', limit: 2, owner: 'b', token: b.token });
    expect(state?.holders?.map((h) => [h.owner, h.token])).toEqual([
      ['a', a.token],
      ['b', b.token],
    ]);
    // The same owner and key again: its holder refreshed, same token.
    expect(granted(await backend.tryAcquire(shared(name, 'a', 2))).token).toBe(a.token);
    expect(await backend.release({ name, token: a.token, keyHash: 'k-a' })).toBe(true);
    const c = granted(await backend.tryAcquire(shared(name, 'c', 2)));
    expect(c.token).toBeGreaterThan(b.token);
    expect(
      await backend.extend({ name, token: c.token, keyHash: 'k-c', ttlMs: 20_000 }),
    ).toMatchObject({ owner: 'c', token: c.token });
    expect(await backend.revoke!(name)).toBe(true);
    expect(await backend.inspect(name)).toBeNull();
    const x = granted(await backend.tryAcquire({ name, owner: 'x', ttlMs: 10_000 }));
    expect(x.token).toBeGreaterThan(c.token);
  });

  it('answers conflicts of mode and limit', async () => {
    const backend = await server();
    const name = lockName('rl-sh-conflict');
    granted(await backend.tryAcquire(shared(name, 'a', 3)));
    expect(await backend.tryAcquire(shared(name, 'b', 4))).toEqual({
      granted: false,
      conflict: { field: 'limit', limit: 3 },
    });
    expect(await backend.tryAcquire({ name, owner: 'a', ttlMs: 10_000, keyHash: 'k-a' })).toEqual({
      granted: false,
      conflict: { field: 'mode' },
    });
  });

  it('N concurrent shared try-locks with limit L on two backends grant at most L', async () => {
    const [one, two] = [await server(), await server()];
    const name = lockName('rl-sh-race');
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        (i % 2 ? one : two).tryAcquire(shared(name, `o${i}`, 3)),
      ),
    );
    const grants = results.filter((r) => r.granted);
    // Split votes may leave fewer than L granted on a try-lock; never more.
    expect(grants.length).toBeGreaterThan(0);
    expect(grants.length).toBeLessThanOrEqual(3);
    expect((await one.inspect(name))?.holders?.length).toBe(grants.length);
  });

  it('announces shared grants with their mode, and each release', async () => {
    const backend = await server();
    const name = lockName('rl-sh-events');
    const events: LockEvent[] = [];
    const stop = backend.watch(name, (event) => events.push(event));
    const a = granted(await backend.tryAcquire(shared(name, 'a', 2)));
    const b = granted(await backend.tryAcquire(shared(name, 'b', 2)));
    await until(async () => events.filter((e) => e.type === 'acquired').length >= 2, {
      what: 'two grants',
    });
    expect(events.filter((e) => e.type === 'acquired').map((e) => [e.token, e.mode])).toEqual([
      [a.token, 'shared'],
      [b.token, 'shared'],
    ]);
    await backend.release({ name, token: a.token, keyHash: 'k-a' });
    await until(async () => events.some((e) => e.type === 'released'), { what: 'a release' });
    stop();
  });
});
