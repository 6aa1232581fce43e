import { createRedisNode, nameKeys } from '@dlm/adapter-redis';
import { granted, lockName, sleep, until } from '@dlm/conformance';
import { isDlmError, type LockEvent, systemClock } from '@dlm/core';
import { breakable, faultScope, type RedisService, startRedisNodes } from '@dlm/test-services';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { type RedlockBackend, redlockBackend } from '../src/index.js';

const enabled = breakable('redis');

describe.skipIf(!enabled)('redlock adapter under faults', () => {
  const scope = faultScope(afterAll);

  async function nodes(count: number): Promise<RedisService[]> {
    return (await startRedisNodes(count)).map((node) => scope.service(node));
  }

  async function backend(
    on: RedisService[],
    options: Partial<Parameters<typeof redlockBackend>[0]> = {},
  ): Promise<RedlockBackend> {
    const created = scope.user(
      redlockBackend({ urls: on.map((node) => node.url), ...options }),
      (lock) => lock.close(),
    );
    await created.ready();
    return created;
  }

  function raw(service: RedisService): Redis {
    const client = scope.user(new Redis(service.url, { maxRetriesPerRequest: 1 }), (c) =>
      c.disconnect(),
    );
    client.on('error', () => {});
    return client;
  }

  it('keeps granting, extending and releasing with 1 of 3 nodes killed', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { commandTimeoutMs: 2_000 });
    await three[0]!.kill();
    const name = lockName('minority-down');
    let last = 0n;
    for (let i = 0; i < 3; i += 1) {
      const started = performance.now();
      const lease = await granted(lock, name, `o${i}`);
      // The dead node refuses at once: no waiting for its time-out.
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(lease.token).toBeGreaterThan(last);
      last = lease.token;
      expect(await lock.extend({ name, token: lease.token, ttlMs: 10_000 })).toMatchObject({
        token: lease.token,
      });
      expect(await lock.inspect(name)).toMatchObject({ owner: `o${i}`, token: lease.token });
      expect(await lock.release({ name, token: lease.token })).toBe(true);
    }
  });

  it('grants nothing with 2 of 3 nodes killed, in bounded time, and leaves nothing on the survivor', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { commandTimeoutMs: 1_000 });
    await Promise.all([three[0]!.kill(), three[1]!.kill()]);
    const name = lockName('majority-down');
    const started = performance.now();
    let outcome: string;
    try {
      const result = await lock.tryAcquire({ name, owner: 'a', ttlMs: 10_000 });
      outcome = result.granted ? 'granted' : 'not granted';
    } catch (error) {
      outcome = isDlmError(error, 'UNAVAILABLE') ? 'unavailable' : String(error);
    }
    expect(outcome).toBe('unavailable');
    expect(performance.now() - started).toBeLessThan(1_300);
    const survivor = raw(three[2]!);
    await until(async () => (await survivor.exists(nameKeys('dlm:', name).lock)) === 0, 2_000);
  });

  it('5 nodes: goes on with 2 killed, stops with 3 killed', async () => {
    const five = await nodes(5);
    const lock = await backend(five, { commandTimeoutMs: 1_000 });
    expect(lock.quorum).toBe(3);
    await Promise.all([five[0]!.kill(), five[1]!.kill()]);
    const lease = await granted(lock, lockName('five'), 'a');
    expect(await lock.release({ name: lease.name, token: lease.token })).toBe(true);
    await five[2]!.kill();
    await expect(
      lock.tryAcquire({ name: lockName('five'), owner: 'b', ttlMs: 5_000 }),
    ).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });

  it('a stalled minority node does not slow grants, and takes no late lock when it resumes', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { commandTimeoutMs: 1_500 });
    await granted(lock, lockName('warm'), 'w');
    const stalled = raw(three[0]!);
    const calls = async () =>
      Number(/cmdstat_evalsha:calls=(\d+)/.exec(await stalled.info('commandstats'))?.[1] ?? 0);
    const before = await calls();
    three[0]!.pause();
    const name = lockName('stalled-minority');
    const started = performance.now();
    await granted(lock, name, 'a');
    // Decided by the quorum's answers, not after the stalled node's time-out.
    expect(performance.now() - started).toBeLessThan(750);
    await sleep(1_700);
    three[0]!.resume();
    // The acquire waiting in its socket runs now, after its deadline, and must do nothing.
    await until(async () => (await calls()) > before, 3_000);
    expect(await stalled.exists(nameKeys('dlm:', name).lock)).toBe(0);
  });

  it('a stalled majority gives UNAVAILABLE within commandTimeoutMs, and no node holds the lock after they resume', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { commandTimeoutMs: 800 });
    await granted(lock, lockName('warm'), 'w');
    three[0]!.pause();
    three[1]!.pause();
    const name = lockName('stalled-majority');
    const started = performance.now();
    await expect(lock.tryAcquire({ name, owner: 'a', ttlMs: 60_000 })).rejects.toMatchObject({
      code: 'UNAVAILABLE',
    });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(750);
    expect(elapsed).toBeLessThan(1_300);
    await sleep(300);
    three[0]!.resume();
    three[1]!.resume();
    const keys = nameKeys('dlm:', name);
    const observers = three.map(raw);
    // Wait until the resumed nodes have run what was queued for them (their counters moved).
    await until(async () => {
      const fences = await Promise.all(observers.map((o) => o.get(keys.fence)));
      return fences.every((fence) => fence !== null) || performance.now() - started > 2_500;
    }, 4_000);
    for (const observer of observers) expect(await observer.exists(keys.lock)).toBe(0);
    expect(await lock.inspect(name)).toBeNull();
  });

  it('tokens keep growing when nodes restart empty one at a time (the adoption raises counters)', async () => {
    const three = await nodes(3);
    const [a, b, c] = three as [RedisService, RedisService, RedisService];
    const lock = await backend(three, { commandTimeoutMs: 1_000 });
    const name = lockName('restarts');
    let last = 0n;
    const cycle = async () => {
      const lease = await granted(lock, name, `o${last}`);
      expect(lease.token).toBeGreaterThan(last);
      last = lease.token;
      await lock.release({ name, token: lease.token });
    };
    for (let i = 0; i < 3; i += 1) await cycle();
    await a.kill();
    await a.start();
    await until(async () => (await raw(a).ping()) === 'PONG', 3_000);
    await sleep(200);
    await cycle();
    // Now only a (restarted once, then raised by adoption) and b (restarted empty) answer:
    // without the adoption a's counter would be 2 and b's 1, below the last token.
    await c.kill();
    await b.kill();
    await b.start();
    await until(async () => {
      try {
        await cycle();
        return true;
      } catch {
        return false;
      }
    }, 5_000);
  });

  it("inspect and list report only a lease a quorum agrees on: one node's partial state is not a holder", async () => {
    const three = await nodes(3);
    const [a, b] = three as [RedisService, RedisService, RedisService];
    const lock = await backend(three);
    const name = lockName('partial');
    const { lock: key } = nameKeys('dlm:', name);
    // A failed quorum attempt's leftover on one node of three.
    await raw(a).set(key, '43:ghost', 'PX', 10_000);
    expect(await lock.inspect(name)).toBeNull();
    expect(await lock.list!(name)).toEqual([]);
    // The same owner on two nodes under two tokens (copies not yet relabelled with the grant's
    // token): no token is agreed, so none is reported, least of all the larger one.
    await raw(b).set(key, '44:ghost', 'PX', 10_000);
    expect(await lock.inspect(name)).toBeNull();
    // A real grant beside the leftover is reported with the token its holder got.
    await raw(a).del(key);
    await raw(b).del(key);
    await raw(a).set(key, '43:ghost', 'PX', 10_000);
    const lease = await granted(lock, name, 'x');
    expect(await lock.inspect(name)).toMatchObject({ owner: 'x', token: lease.token });
    expect(await lock.list!(name)).toMatchObject([{ owner: 'x', token: lease.token }]);
  });

  it('a grant is reported with the token a quorum of nodes carries, and a release leaves no quorum behind, as another server reads them at once', async () => {
    const three = await nodes(3);
    const lock = await backend(three);
    const reader = await backend(three);
    const name = lockName('read-after');
    for (let i = 0; i < 20; i += 1) {
      const lease = await granted(lock, name, `o${i}`);
      expect(await reader.inspect(name)).toMatchObject({ owner: `o${i}`, token: lease.token });
      await lock.release({ name, token: lease.token });
      expect(await reader.inspect(name)).toBeNull();
    }
  });

  it('each change is reported once, although every node announces it', async () => {
    const three = await nodes(3);
    const watcher = await backend(three);
    const actor = await backend(three);
    const name = lockName('dedupe');
    const events: LockEvent[] = [];
    watcher.watch(name, (event) => events.push(event));
    const lease = await granted(actor, name, 'a');
    await actor.release({ name, token: lease.token });
    await until(() => events.some((event) => event.type === 'released'), 2_000);
    await sleep(200);
    expect(events.map((event) => event.type)).toEqual(['acquired', 'released']);
    expect(events[0]).toMatchObject({ token: lease.token, owner: 'a' });
    for (const node of three) {
      const list = String(await raw(node).call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
      // One subscriber connection per backend instance, subscribed to the channels of the names
      // it watches: the watcher's one name; the actor watches nothing, so it subscribed nothing.
      const lines = list.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/ sub=1 /);
    }
  });

  it('the lease granted covers the ttl asked for, and the nodes hold it a little longer', async () => {
    const three = await nodes(3);
    const lock = await backend(three);
    const name = lockName('validity');
    const lease = await granted(lock, name, 'a', 5_000);
    expect(lease.ttlMs).toBeGreaterThanOrEqual(5_000);
    const pttls = await Promise.all(
      three.map((node) => raw(node).pttl(nameKeys('dlm:', name).lock)),
    );
    for (const pttl of pttls) expect(pttl).toBeGreaterThan(lease.ttlMs);
    // Without the latency allowance the validity is what Redlock's formula leaves: less.
    const strict = await backend(three, { latencyAllowanceMs: 0 });
    const tight = await granted(strict, lockName('validity'), 'b', 5_000);
    expect(tight.ttlMs).toBeLessThan(5_000);
    expect(tight.ttlMs).toBeGreaterThan(4_900);
  });

  /**
   * What an acquire leaves on the nodes when its dlm server dies between Redlock's two steps:
   * fresh copies on a majority, never labelled with one token, so no quorum agrees on a holder
   * (a reader sees the lock free). Planted here with the node's own first step.
   */
  async function plantSplit(on: RedisService[], name: string, freshMs?: number): Promise<void> {
    for (const service of on) {
      const node = createRedisNode({
        client: raw(service),
        prefix: 'dlm:',
        commandTimeoutMs: 2_000,
        clock: systemClock,
        publishAcquired: false,
        fenceRetentionMs: 60_000,
      });
      const taken = await node.acquire(
        name,
        'died-half-way',
        undefined,
        10_000,
        undefined,
        freshMs,
      );
      expect(taken.granted).toBe(true);
    }
  }

  it('an acquire that died half-way: its copies live acquireAttemptMs, and a contender gets the lock then, never LOCK_HELD', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { acquireAttemptMs: 300 });
    const name = lockName('dead-split');
    await plantSplit(three.slice(0, 2), name, 300);
    expect(await lock.inspect(name)).toBeNull(); // no quorum agrees: a reader sees it free
    const started = performance.now();
    const result = await lock.tryAcquire({ name, owner: 'b', ttlMs: 5_000 });
    expect(result.granted).toBe(true);
    expect(performance.now() - started).toBeLessThan(300 + 500);
    // The first step's copies are short; labelled, the grant's live the whole lease.
    const pttls = await Promise.all(
      three.map((node) => raw(node).pttl(nameKeys('dlm:', name).lock)),
    );
    expect(pttls.filter((pttl) => pttl > 5_000)).toHaveLength(3);
  });

  it('a split that does not clear (copies taken for the whole ttl) is refused once acquireAttemptMs has passed, not sooner and not never', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { acquireAttemptMs: 200 });
    const name = lockName('lasting-split');
    await plantSplit(three.slice(0, 2), name);
    const started = performance.now();
    const result = await lock.tryAcquire({ name, owner: 'b', ttlMs: 5_000 });
    const elapsed = performance.now() - started;
    expect(result.granted).toBe(false);
    expect(elapsed).toBeGreaterThanOrEqual(200);
    expect(elapsed).toBeLessThan(200 + 1_000);
  });

  it('a holder a quorum agrees on is refused at once', async () => {
    const three = await nodes(3);
    const lock = await backend(three, { acquireAttemptMs: 2_000 });
    const name = lockName('agreed-holder');
    await granted(lock, name, 'a', 5_000);
    const started = performance.now();
    expect((await lock.tryAcquire({ name, owner: 'b', ttlMs: 5_000 })).granted).toBe(false);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('refuses a bad acquireAttemptMs with its field', () => {
    for (const acquireAttemptMs of [0, 5, 1.5, 120_000]) {
      expect(() => redlockBackend({ urls: ['redis://127.0.0.1:1'], acquireAttemptMs })).toThrow(
        expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'acquireAttemptMs' } }),
      );
    }
  });
});
