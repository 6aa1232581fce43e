import { lockName, until, waitThrough } from '@dlm/conformance';
import type { Lease } from '@dlm/core';
import { redisAvailable } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import {
  nameKeys,
  type RedisBackend,
  type RedisBackendOptions,
  redisBackend,
} from '../src/index.js';
import { queueProbe } from './queue-probe.js';
import { useRedis } from './support.js';

const enabled = redisAvailable();

/** Short, so that an entry left behind by a dead server stops counting within a test. */
const WAITER_TTL_MS = 900;

describe.skipIf(!enabled)('redis fair queue across servers', () => {
  const redis = useRedis();
  const opened: RedisBackend[] = [];
  const clients: Redis[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((backend) => backend.close()));
    for (const client of clients.splice(0)) client.disconnect();
  });

  /** One dlm server's backend on the test's Redis. */
  const server = async (more: Partial<RedisBackendOptions> = {}) => {
    const backend = redisBackend({ url: redis().url, waiterTtlMs: WAITER_TTL_MS, ...more });
    opened.push(backend);
    await backend.ready();
    return backend;
  };
  /**
   * A server on a connection of the test's own, which the test cuts (`client.disconnect()`) as
   * when the server dies: it can no longer renew or remove its entries.
   */
  const severable = async () => {
    const client = new Redis(redis().url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    });
    clients.push(client);
    return { client, backend: await server({ client }) };
  };
  const entries = (name: string) => queueProbe({ url: redis().url }).entries(name);
  const untilQueued = (name: string, count: number) =>
    until(async () => (await entries(name)).length >= count, { what: `${count} in ${name}` });
  const wait = (backend: RedisBackend, name: string, owner: string, signal?: AbortSignal) =>
    waitThrough(backend, { name, owner, ...(signal ? { signal } : {}) });
  const take = async (backend: RedisBackend, name: string, owner: string) => {
    const result = await backend.tryAcquire({ name, owner, ttlMs: 10_000 });
    if (!result.granted) throw new Error(`expected ${owner} to take ${name}`);
    return result.grant;
  };

  it('declares fairQueue and sharedModes on single Redis', async () => {
    expect((await server()).capabilities).toMatchObject({ fairQueue: true, sharedModes: true });
  });

  it('grants six waiters on three servers in the order they queued, and leaves no entry', async () => {
    const servers = [await server(), await server(), await server()];
    const name = lockName('fq-three');
    const holder = await take(servers[0]!, name, 'holder');
    const order: string[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 6; i += 1) {
      const backend = servers[i % 3]!;
      waits.push(
        wait(backend, name, `w${i}`).then(async (lease) => {
          order.push(lease.owner);
          await backend.release({ name, token: lease.token });
        }),
      );
      await untilQueued(name, i + 1);
    }
    await servers[0]!.release({ name, token: holder.token });
    await Promise.all(waits);
    expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
    expect(await entries(name)).toEqual([]);
  });

  it('a try-lock on a free lock is refused while a live entry waits, and granted once it stops counting', async () => {
    const [{ client, backend: dying }, other] = [await severable(), await server()];
    const name = lockName('fq-no-barging');
    const holder = await take(other, name, 'holder');
    const waiting = wait(dying, name, 'waiter').catch(() => undefined);
    await untilQueued(name, 1);
    // The waiter's server goes: its entry stays, unrenewed, for up to WAITER_TTL_MS.
    client.disconnect();
    expect(await other.release({ name, token: holder.token })).toBe(true);
    const refused = await other.tryAcquire({ name, owner: 'barger', ttlMs: 10_000 });
    expect(refused).toEqual({ granted: false });
    const startedAt = performance.now();
    await until(
      async () => (await other.tryAcquire({ name, owner: 'barger', ttlMs: 10_000 })).granted,
      {
        what: 'the try-lock granted once the entry stopped counting',
        timeoutMs: WAITER_TTL_MS * 3,
      },
    );
    expect(performance.now() - startedAt).toBeLessThan(WAITER_TTL_MS + 500);
    await waiting;
  });

  it("the holder's own re-acquire is no barging: it gets its lease back while others wait", async () => {
    const [a, b] = [await server(), await server()];
    const name = lockName('fq-own');
    const holder = await take(a, name, 'holder');
    const controller = new AbortController();
    const waiting = wait(b, name, 'waiter', controller.signal).catch((error: unknown) => error);
    await untilQueued(name, 1);
    const again = await a.tryAcquire({ name, owner: 'holder', ttlMs: 10_000 });
    expect(again.granted && again.grant.token).toBe(holder.token);
    const other = await a.tryAcquire({ name, owner: 'someone', ttlMs: 10_000 });
    expect(other.granted).toBe(false);
    controller.abort();
    expect(await waiting).toMatchObject({ code: 'CANCELLED' });
  });

  it('a waiter whose server died mid-wait holds the next one up for about waiterTtlMs, no longer', async () => {
    const [{ client, backend: dying }, next, holderServer] = [
      await severable(),
      await server(),
      await server(),
    ];
    const name = lockName('fq-dead');
    const holder = await take(holderServer, name, 'holder');
    const lost = wait(dying, name, 'dead').catch(() => undefined);
    await untilQueued(name, 1);
    const granted: Promise<Lease> = wait(next, name, 'next');
    await untilQueued(name, 2);
    client.disconnect();
    const releasedAt = performance.now();
    await holderServer.release({ name, token: holder.token });
    const lease = await granted;
    const waitedMs = performance.now() - releasedAt;
    expect(lease.owner).toBe('next');
    // The dead entry counted until its end (at most WAITER_TTL_MS after its last renewal).
    expect(waitedMs).toBeLessThan(WAITER_TTL_MS + 500);
    await lost;
    expect(await entries(name)).toEqual([]);
  });

  it('a waiter whose server closes mid-wait leaves the queue: the next one is granted at once', async () => {
    const [closing, next, holderServer] = [await server(), await server(), await server()];
    const name = lockName('fq-closed');
    const holder = await take(holderServer, name, 'holder');
    const closed = wait(closing, name, 'closing').catch((error: unknown) => error);
    await untilQueued(name, 1);
    const granted = wait(next, name, 'next');
    await untilQueued(name, 2);
    await closing.close();
    expect(await closed).toMatchObject({ code: 'UNAVAILABLE' });
    expect(await entries(name)).toHaveLength(1);
    const releasedAt = performance.now();
    await holderServer.release({ name, token: holder.token });
    expect((await granted).owner).toBe('next');
    expect(performance.now() - releasedAt).toBeLessThan(WAITER_TTL_MS / 2);
  });

  it('waiterTtlMs must be a whole number of ms ≥ 30', () => {
    for (const waiterTtlMs of [0, 29, 1.5, Number.NaN]) {
      expect(() => redisBackend({ url: redis().url, waiterTtlMs })).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'waiterTtlMs' } }),
      );
    }
  });

  it('once every shared holder of a name has gone, nothing of it is left but its fence', async () => {
    const backend = await server();
    const name = lockName('sh-keys');
    const shared = { name, ttlMs: 10_000, mode: 'shared', limit: 3 } as const;
    const a = await backend.tryAcquire({ ...shared, owner: 'a', keyHash: 'k-a' });
    const b = await backend.tryAcquire({ ...shared, owner: 'b', keyHash: 'k-b' });
    if (!a.granted || !b.granted) throw new Error('expected two holders');
    expect(await backend.release({ name, token: a.grant.token, keyHash: 'k-a' })).toBe(true);
    expect(await backend.release({ name, token: b.grant.token, keyHash: 'k-b' })).toBe(true);
    const client = new Redis(redis().url, { maxRetriesPerRequest: 0 });
    clients.push(client);
    const keys = nameKeys('dlm:', name);
    expect(await client.keys(`dlm:{${keys.hex}}*`)).toEqual([keys.fence]);
  });
});
