import { expectRefusedAtOnce, failure, lockName, sleep, until } from '@dlm/conformance';
import { createLockService, type LockEvent } from '@dlm/core';
import { breakable, faultScope, type RedisService, startRedis } from '@dlm/test-services';
import { Redis, type RedisOptions } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { type RedisBackend, redisBackend } from '../src/index.js';
import { nameKeys } from '../src/key-encoding.js';

const enabled = breakable('redis');

describe.skipIf(!enabled)('redis adapter under faults', () => {
  const scope = faultScope(afterAll);

  async function redis(options: Parameters<typeof startRedis>[0] = {}): Promise<RedisService> {
    return scope.service(await startRedis(options));
  }

  async function backend(options: Parameters<typeof redisBackend>[0]): Promise<RedisBackend> {
    const created = scope.user(redisBackend(options), (lock) => lock.close());
    await created.ready();
    return created;
  }

  /** A client of the test's own on `service` (its errors ignored), ended with the scope. */
  function own(service: RedisService, options: RedisOptions): Redis {
    const client = scope.user(new Redis(service.url, options), (c) => c.disconnect());
    client.on('error', () => {});
    return client;
  }

  /** A fresh Redis, and a backend on it with `options`. */
  async function backendOnNewRedis(options: Omit<Parameters<typeof redisBackend>[0], 'url'> = {}) {
    const service = await redis();
    return { service, lock: await backend({ url: service.url, ...options }) };
  }

  /** Until a try-lock on a fresh name is granted again (Redis is back and the client with it). */
  function lockingResumes(lock: RedisBackend): Promise<void> {
    return until(async () => {
      try {
        return (await lock.tryAcquire({ name: lockName('back'), owner: 'c', ttlMs: 5_000 }))
          .granted;
      } catch {
        return false;
      }
    }, 8_000);
  }

  /** A fresh connection of the test's own, to look at what the server really holds. */
  function raw(service: RedisService): Redis {
    return own(service, { maxRetriesPerRequest: 1 });
  }

  async function scriptCalls(client: Redis): Promise<{ evalsha: number; eval: number }> {
    const stats = await client.info('commandstats');
    const calls = (command: string) => {
      const match = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats);
      return match ? Number(match[1]) : 0;
    };
    return { evalsha: calls('evalsha'), eval: calls('eval') };
  }

  it('a killed Redis gives UNAVAILABLE at once, and locking resumes once it is back', async () => {
    const { service, lock } = await backendOnNewRedis({ commandTimeoutMs: 1_000 });
    const name = lockName('down');
    expect((await lock.tryAcquire({ name, owner: 'a', ttlMs: 5_000 })).granted).toBe(true);
    await service.kill();
    const started = performance.now();
    const error = await failure(
      lock.tryAcquire({ name: lockName('down'), owner: 'b', ttlMs: 5_000 }),
    );
    expect(error.code).toBe('UNAVAILABLE');
    expect(performance.now() - started).toBeLessThan(1_300);
    // Refused before sending: nothing can have happened, so it is not indeterminate.
    expect(error.details.indeterminate).toBeUndefined();
    await service.start();
    await lockingResumes(lock);
  });

  it("while Redis is down, UNAVAILABLE says so in the user's words (not ioredis internals)", async () => {
    const { service, lock } = await backendOnNewRedis({ commandTimeoutMs: 1_000 });
    expect(
      (await lock.tryAcquire({ name: lockName('words'), owner: 'a', ttlMs: 5_000 })).granted,
    ).toBe(true);
    await service.kill();
    await sleep(500); // past the first reconnect attempt: the client knows it is not connected
    const error = await failure(
      lock.tryAcquire({ name: lockName('words'), owner: 'b', ttlMs: 5_000 }),
    );
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(/not connected to Redis/);
    expect(error.message).not.toMatch(/Stream isn't writeable|enableOfflineQueue/);
    await service.start();
  });

  it('Redis down when the backend starts: calls fail at once, as after an outage, and locking starts once it is up', async () => {
    const service = await redis();
    await service.kill();
    const lock = scope.user(redisBackend({ url: service.url, commandTimeoutMs: 2_000 }), (l) =>
      l.close(),
    );
    // Once refused, not the whole commandTimeoutMs each ("did not take earlier commands").
    const errors = await expectRefusedAtOnce(
      lock,
      /^acquire: not connected to Redis \(connect ECONNREFUSED .*; reconnecting\)$/,
    );
    for (const error of errors) expect(error.details.indeterminate).toBeUndefined();
    await service.start();
    await lockingResumes(lock);
  });

  it('a stalled Redis gives indeterminate UNAVAILABLE within commandTimeoutMs, and no late grant after it resumes', async () => {
    const { service, lock } = await backendOnNewRedis({ commandTimeoutMs: 800 });
    const observer = raw(service);
    const name = lockName('stall');
    const warm = await lock.tryAcquire({ name: lockName('warm'), owner: 'w', ttlMs: 5_000 });
    expect(warm.granted).toBe(true);
    const before = await scriptCalls(observer);

    service.pause();
    const started = performance.now();
    const error = await failure(lock.tryAcquire({ name, owner: 'late', ttlMs: 60_000 }));
    const elapsed = performance.now() - started;
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.details.indeterminate).toBe(true);
    expect(elapsed).toBeGreaterThanOrEqual(750);
    expect(elapsed).toBeLessThan(1_300);
    await sleep(300);
    service.resume();

    // The acquire sat in the stopped server's socket buffer: it does run now, after its
    // deadline, and must do nothing.
    await until(async () => (await scriptCalls(observer)).evalsha > before.evalsha, 3_000);
    const keys = nameKeys('dlm:', name);
    expect(await observer.exists(keys.lock)).toBe(0);
    expect(await observer.exists(keys.fence)).toBe(0);
    await until(async () => {
      try {
        return (await lock.inspect(name)) === null;
      } catch {
        return false;
      }
    }, 5_000);
    expect((await lock.tryAcquire({ name, owner: 'next', ttlMs: 5_000 })).granted).toBe(true);
  });

  it('orphan: an acquire resent after a reconnect by a client set to replay (worst case) takes no lock', async () => {
    const service = await redis();
    // Everything the adapter recommends against: offline queue, resend, unlimited retries.
    const client = own(service, {
      enableOfflineQueue: true,
      autoResendUnfulfilledCommands: true,
      maxRetriesPerRequest: null,
    });
    const lock = await backend({ client, commandTimeoutMs: 500 });
    const observer = raw(service);
    expect(
      (await lock.tryAcquire({ name: lockName('warm'), owner: 'w', ttlMs: 5_000 })).granted,
    ).toBe(true);
    const before = await scriptCalls(observer);
    const name = lockName('orphan');

    service.pause();
    const error = await failure(lock.tryAcquire({ name, owner: 'ghost', ttlMs: 60_000 }));
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.details.indeterminate).toBe(true);
    // Drop the connection with the acquire in flight: ioredis will resend it on reconnect.
    client.stream.destroy();
    await sleep(200);
    service.resume();

    // Twice: once from the stopped server's buffer, once more as ioredis's resend.
    await until(async () => (await scriptCalls(observer)).evalsha >= before.evalsha + 2, 5_000);
    await until(() => client.status === 'ready', 5_000);
    await sleep(100);
    const keys = nameKeys('dlm:', name);
    expect(await observer.exists(keys.lock)).toBe(0);
    expect(await observer.get(keys.fence)).toBeNull();
  });

  it('orphan: an acquire left in the offline queue while Redis was down is not run when it is back', async () => {
    const service = await redis();
    const client = own(service, {
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      retryStrategy: () => 50,
    });
    const lock = await backend({ client, commandTimeoutMs: 500 });
    expect(
      (await lock.tryAcquire({ name: lockName('warm'), owner: 'w', ttlMs: 5_000 })).granted,
    ).toBe(true);
    const name = lockName('offline');
    await service.kill();
    const error = await failure(lock.tryAcquire({ name, owner: 'ghost', ttlMs: 60_000 }));
    expect(error.code).toBe('UNAVAILABLE');
    await service.start();
    await until(() => client.status === 'ready', 5_000);
    await sleep(200);
    const observer = raw(service);
    expect(await observer.exists(nameKeys('dlm:', name).lock)).toBe(0);
    // The queued EVALSHA ran after its deadline and did nothing, and nothing sent it again.
    expect((await scriptCalls(observer)).eval).toBe(0);
  });

  it('with AOF appendfsync always, tokens keep increasing across kill -9 and restart', async () => {
    const service = await redis({ aof: true });
    const name = lockName('aof');
    let lock = await backend({ url: service.url, durable: true });
    expect(lock.capabilities.durableAcrossRestart).toBe(true);
    let last = 0n;
    for (let i = 0; i < 3; i += 1) {
      const result = await lock.tryAcquire({ name, owner: `o${i}`, ttlMs: 5_000 });
      if (!result.granted) throw new Error('not granted');
      last = result.grant.token;
      expect(await lock.release({ name, token: last })).toBe(true);
    }
    const held = await lock.tryAcquire({ name: `${name}/held`, owner: 'h', ttlMs: 60_000 });
    expect(held.granted).toBe(true);
    await lock.close();
    await service.kill();
    await service.start();
    lock = await backend({ url: service.url, durable: true });
    const after = await lock.tryAcquire({ name, owner: 'after', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(last);
    expect(
      (await lock.tryAcquire({ name: `${name}/held`, owner: 'x', ttlMs: 5_000 })).granted,
    ).toBe(false);
  });

  it('without persistence a restart forgets held locks (why durable defaults to false), yet tokens still grow: they come from the server clock', async () => {
    const service = await redis();
    const name = lockName('volatile');
    let lock = await backend({ url: service.url });
    expect(lock.capabilities.durableAcrossRestart).toBe(false);
    let last = 0n;
    for (let i = 0; i < 3; i += 1) {
      const result = await lock.tryAcquire({ name, owner: `o${i}`, ttlMs: 5_000 });
      if (result.granted) last = result.grant.token;
    }
    await lock.close();
    await service.kill();
    await service.start();
    lock = await backend({ url: service.url });
    const after = await lock.tryAcquire({ name, owner: 'after', ttlMs: 5_000 });
    // Granted although 'o0' held the lock before the restart: the restart forgot it.
    expect(after.granted && after.grant.token).toBeGreaterThan(last);
  });

  it('nothing per name remains once the lease and the fence retention have passed, and the next token is still larger', async () => {
    const { service, lock } = await backendOnNewRedis({ fenceRetentionMs: 200 });
    const observer = raw(service);
    const name = lockName('residue');
    const keys = nameKeys('dlm:', name);
    const first = await lock.tryAcquire({ name, owner: 'a', ttlMs: 300 });
    if (!first.granted) throw new Error('expected a grant');
    const fenceTtl = await observer.pttl(keys.fence);
    expect(fenceTtl).toBeGreaterThan(300);
    expect(fenceTtl).toBeLessThanOrEqual(500);
    await lock.release({ name, token: first.grant.token });
    await until(async () => (await observer.exists(keys.lock, keys.fence)) === 0, 2_000);
    const second = await lock.tryAcquire({ name, owner: 'b', ttlMs: 300 });
    expect(second.granted && second.grant.token).toBeGreaterThan(first.grant.token);
  });

  it('rejects a fenceRetentionMs that is not a whole number of ms ≥ 1', () => {
    for (const fenceRetentionMs of [0, -1, 1.5, Number.NaN]) {
      expect(() => redisBackend({ url: 'redis://127.0.0.1:1', fenceRetentionMs })).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'fenceRetentionMs' } }),
      );
    }
  });

  it('names with braces, colons and any Unicode are distinct locks, each keyed in one hash slot', async () => {
    const { lock } = await backendOnNewRedis();
    const base = lockName('enc');
    const names = ['', ':', '{', '}', '{x}', '}{', 'a:b', 'a{b}c', 'ü', '🔒', 'a b', '\u00a0'].map(
      (suffix) => `${base}${suffix}`,
    );
    for (const name of names) {
      const result = await lock.tryAcquire({ name, owner: `owner of ${name}`, ttlMs: 10_000 });
      expect(result.granted).toBe(true);
      const keys = nameKeys('dlm:', name);
      const tag = (key: string) => key.slice(key.indexOf('{') + 1, key.indexOf('}'));
      expect(tag(keys.lock)).toBe(tag(keys.fence));
      expect(tag(keys.lock)).toBe(keys.hex);
    }
    for (const name of names) {
      expect(await lock.inspect(name)).toMatchObject({ name, owner: `owner of ${name}` });
    }
    const listed = await lock.list!(base);
    expect(listed.map((state) => state.name).sort()).toEqual([...names].sort());
    expect(await lock.list!(`${base}{`)).toHaveLength(2);
  });

  it('watch: thousands of names share one subscriber connection, and events reach only their name', async () => {
    const { service, lock } = await backendOnNewRedis();
    const other = await backend({ url: service.url });
    const observer = raw(service);
    const base = lockName('many');
    const seen = new Map<string, LockEvent[]>();
    const stops = Array.from({ length: 3_000 }, (_, i) => {
      const name = `${base}/${i}`;
      return lock.watch(name, (event) => {
        seen.set(name, [...(seen.get(name) ?? []), event]);
      });
    });
    const pubsub = String(await observer.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
    expect(pubsub.trim().split('\n')).toHaveLength(2); // one per backend, not per name
    const target = `${base}/1234`;
    const result = await other.tryAcquire({ name: target, owner: 'o', ttlMs: 10_000 });
    if (!result.granted) throw new Error('not granted');
    await other.release({ name: target, token: result.grant.token });
    await until(() => (seen.get(target)?.length ?? 0) >= 2, 2_000);
    expect(seen.get(target)?.map((event) => event.type)).toEqual(['acquired', 'released']);
    expect(seen.get(target)?.[1]).toMatchObject({ token: result.grant.token, owner: 'o' });
    expect([...seen.keys()]).toEqual([target]);
    for (const stop of stops) stop();
  });

  it('expiry is reported with the token of the lease that ended', async () => {
    const { lock } = await backendOnNewRedis();
    expect(lock.capabilities.expiryEvents).toBe(true);
    const name = lockName('expire');
    const events: LockEvent[] = [];
    lock.watch(name, (event) => events.push(event));
    const result = await lock.tryAcquire({ name, owner: 'a', ttlMs: 200 });
    if (!result.granted) throw new Error('not granted');
    await until(() => events.some((event) => event.type === 'expired'), 2_000);
    expect(events.find((event) => event.type === 'expired')).toEqual({
      name,
      type: 'expired',
      token: result.grant.token,
    });
  });

  it('on a Redis that refuses CONFIG, expiryEvents is false and waiters still get the lock when the lease ends', async () => {
    const service = await redis({ args: ['--rename-command', 'CONFIG', ''] });
    const lock = await backend({ url: service.url });
    expect(lock.capabilities.expiryEvents).toBe(false);
    const service2 = createLockService({ backend: lock });
    const name = lockName('no-config');
    await service2.acquire({ name, owner: 'holder', ttlMs: 300 });
    const started = performance.now();
    const next = await service2.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 5_000 });
    expect(next.owner).toBe('waiter');
    expect(performance.now() - started).toBeLessThan(1_000);
    await service2.close();
  });

  it('a release missed while the subscriber was disconnected still wakes the waiter once it resubscribes', async () => {
    const { service, lock } = await backendOnNewRedis();
    const observer = raw(service);
    const locks = createLockService({ backend: lock });
    const name = lockName('missed');
    await locks.acquire({ name, owner: 'holder', ttlMs: 30_000 });
    const waiting = locks.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
    await sleep(100);
    // Atomically: drop every subscriber, then free the lock without any event.
    await observer.multi().client('KILL', 'TYPE', 'pubsub').del(nameKeys('dlm:', name).lock).exec();
    const started = performance.now();
    const granted = await waiting;
    expect(granted.owner).toBe('waiter');
    expect(performance.now() - started).toBeLessThan(3_000);
    await locks.close();
  });

  it('revoke frees the lock and tells watchers whose lease it ended', async () => {
    const { lock } = await backendOnNewRedis();
    const name = lockName('revoke');
    const events: LockEvent[] = [];
    lock.watch(name, (event) => events.push(event));
    const result = await lock.tryAcquire({ name, owner: 'a', ttlMs: 30_000 });
    if (!result.granted) throw new Error('not granted');
    expect(await lock.revoke!(name)).toBe(true);
    expect(await lock.revoke!(name)).toBe(false);
    expect(await lock.inspect(name)).toBeNull();
    await until(() => events.some((event) => event.type === 'revoked'), 2_000);
    expect(events.find((event) => event.type === 'revoked')).toMatchObject({
      token: result.grant.token,
      owner: 'a',
    });
  });
});
