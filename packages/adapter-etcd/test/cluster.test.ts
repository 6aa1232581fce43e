import { isDlmError, type LockBackend } from '@dlm/core';
import { type EtcdService, etcdAvailable, etcdManaged, startEtcdCluster } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { etcdBackend } from '../src/index.js';

const run = etcdAvailable() && etcdManaged();
const commandTimeoutMs = 2_000;
let unique = 0;
const lockName = (label: string) => `cluster/${label}/${process.pid}-${Date.now()}-${++unique}`;

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

describe.skipIf(!run)('etcd backend on a three-member cluster', () => {
  let etcd: EtcdService;
  let backend: LockBackend;
  beforeAll(async () => {
    etcd = await startEtcdCluster(3, { heartbeatIntervalMs: 50, electionTimeoutMs: 500 });
    backend = etcdBackend({ endpoints: etcd.endpoints, minTtlMs: 1_000, commandTimeoutMs });
  });
  afterAll(async () => {
    await backend?.close();
    await etcd?.stop();
  });

  it('a held lock survives kill -9 of the leader, and locking goes on after re-election', async () => {
    const name = lockName('held');
    const held = await backend.tryAcquire({ name, owner: 'holder', ttlMs: 20_000 });
    if (!held.granted) throw new Error('expected a grant');
    const leader = await etcd.waitForLeader();

    await leader.process.kill();
    const pauseMs = await timeUntilLockingWorks(backend, 15_000);
    console.log(`[etcd] locking resumed ${Math.round(pauseMs)} ms after kill -9 of the leader`);
    expect(pauseMs).toBeLessThan(10_000);

    // The lock is still held by the same lease: same token, and nobody else gets it.
    expect((await backend.inspect(name))?.token).toBe(held.grant.token);
    const intruder = await backend.tryAcquire({ name, owner: 'intruder', ttlMs: 5_000 });
    expect(intruder.granted).toBe(false);
    const extended = await backend.extend({ name, token: held.grant.token, ttlMs: 20_000 });
    expect(extended?.token).toBe(held.grant.token);
    // A new grant after the failover still gets a higher token.
    const after = await backend.tryAcquire({ name: lockName('after'), owner: 'a', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(held.grant.token);

    await leader.process.start();
  });

  it('with a majority down: UNAVAILABLE within the bound, nothing granted; locking resumes when members return', async () => {
    await etcd.waitForLeader();
    const before = await backend.tryAcquire({ name: lockName('before'), owner: 'a', ttlMs: 5_000 });
    if (!before.granted) throw new Error('expected a grant');
    const [first, second] = etcd.members.filter((member) => member.process.running);
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
    console.log(`[etcd] majority down: UNAVAILABLE after ${waits.join(', ')} ms`);
    const released = await backend.release({ name, token: before.grant.token }).then(
      () => 'answered',
      (failure: unknown) => (isDlmError(failure, 'UNAVAILABLE') ? 'unavailable' : failure),
    );
    expect(released).toBe('unavailable');

    // Members come back together (each one alone is a minority and never reports healthy).
    const restarted = performance.now();
    await Promise.all([first!.process.start(), second!.process.start()]);
    await timeUntilLockingWorks(backend, 15_000);
    const resumeMs = Math.round(performance.now() - restarted);
    console.log(`[etcd] locking resumed ${resumeMs} ms after restarting the two members`);
    // Nothing asked for during the outage was granted.
    expect(await backend.inspect(name)).toBeNull();
    const after = await backend.tryAcquire({ name, owner: 'w', ttlMs: 5_000 });
    expect(after.granted && after.grant.token).toBeGreaterThan(before.grant.token);
  });
});
