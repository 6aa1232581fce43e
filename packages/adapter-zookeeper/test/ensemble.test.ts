import { isDlmError, type LockBackend } from '@dlm/core';
import {
  startZooKeeperEnsemble,
  type ZooKeeperService,
  zookeeperAvailable,
  zookeeperManaged,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zookeeperBackend } from '../src/index.js';

const run = zookeeperAvailable() && zookeeperManaged();
const commandTimeoutMs = 2_000;
let unique = 0;
const lockName = (label: string) => `ensemble/${label}/${process.pid}-${Date.now()}-${++unique}`;

/** Retries a grant of a fresh name until one succeeds; resolves with how long that took. */
async function timeUntilLockingWorks(backend: LockBackend, limitMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    try {
      const result = await backend.tryAcquire({
        name: lockName('probe'),
        owner: 'p',
        ttlMs: 5_000,
      });
      if (result.granted) return performance.now() - started;
    } catch (error) {
      if (!isDlmError(error, 'UNAVAILABLE')) throw error;
    }
    if (performance.now() - started > limitMs) throw new Error('locking did not resume in time');
  }
}

describe.skipIf(!run)('zookeeper backend on a three-member ensemble', () => {
  let zk: ZooKeeperService;
  let backend: LockBackend;
  beforeAll(async () => {
    zk = await startZooKeeperEnsemble(3);
    // 4 s is the longest session tickTime=200 allows: long enough to ride out an election.
    backend = zookeeperBackend({
      connect: zk.connectString,
      sessionTimeoutMs: 4_000,
      commandTimeoutMs,
    });
  });
  afterAll(async () => {
    await backend?.close();
    await zk?.stop();
  });

  it('a held lock survives kill -9 of the leader, and locking goes on after re-election', async () => {
    const name = lockName('held');
    const held = await backend.tryAcquire({ name, owner: 'holder', ttlMs: 30_000 });
    if (!held.granted) throw new Error('expected a grant');
    const leader = await zk.waitForLeader();

    await leader.process.kill();
    const pauseMs = await timeUntilLockingWorks(backend, 15_000);
    console.log(
      `[zookeeper] locking resumed ${Math.round(pauseMs)} ms after kill -9 of the leader`,
    );
    expect(pauseMs).toBeLessThan(10_000);

    // The same session, the same node: same token, and nobody else gets the lock.
    expect((await backend.inspect(name))?.token).toBe(held.grant.token);
    const intruder = await backend.tryAcquire({ name, owner: 'intruder', ttlMs: 5_000 });
    expect(intruder.granted).toBe(false);
    const extended = await backend.extend({ name, token: held.grant.token, ttlMs: 30_000 });
    expect(extended?.token).toBe(held.grant.token);
    const after = await backend.tryAcquire({ name: lockName('after'), owner: 'a', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(held.grant.token);

    await leader.process.start();
  });

  it('with a majority down: UNAVAILABLE within the bound, nothing granted; locking resumes when members return', async () => {
    await zk.waitForLeader();
    const before = await backend.tryAcquire({ name: lockName('before'), owner: 'a', ttlMs: 5_000 });
    if (!before.granted) throw new Error('expected a grant');
    const [first, second] = zk.members.filter((member) => member.process.running);
    await Promise.all([first!.process.kill(), second!.process.kill()]);

    const name = lockName('outage');
    const waits: number[] = [];
    for (let i = 0; i < 3; i += 1) {
      const started = performance.now();
      const error = await backend.tryAcquire({ name, owner: 'w', ttlMs: 5_000 }).then(
        () => undefined,
        (failure: unknown) => failure,
      );
      const elapsed = performance.now() - started;
      expect(isDlmError(error, 'UNAVAILABLE')).toBe(true);
      expect(elapsed).toBeLessThan(commandTimeoutMs + 500);
      waits.push(Math.round(elapsed));
    }
    console.log(`[zookeeper] majority down: UNAVAILABLE after ${waits.join(', ')} ms`);

    // Members come back together (each one alone is a minority and never leads or follows).
    const restarted = performance.now();
    await Promise.all([first!.process.start(), second!.process.start()]);
    await timeUntilLockingWorks(backend, 20_000);
    const resumeMs = Math.round(performance.now() - restarted);
    console.log(`[zookeeper] locking resumed ${resumeMs} ms after restarting the two members`);
    expect(await backend.inspect(name)).toBeNull();
    const after = await backend.tryAcquire({ name, owner: 'w', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(before.grant.token);
  });
});
