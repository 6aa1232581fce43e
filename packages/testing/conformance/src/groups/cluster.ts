import { isDlmError, type LockBackend } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { lockName } from '../support.js';
import type { ClusterTarget } from '../target.js';
import { useService } from '../use-service.js';

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

/** What a call answers during an outage: 'answered', 'unavailable', or the unexpected error. */
const outcomeOf = (call: Promise<unknown>) =>
  call.then(
    () => 'answered',
    (failure: unknown) => (isDlmError(failure, 'UNAVAILABLE') ? 'unavailable' : failure),
  );

/**
 * Two-server group: cluster failover, for a backend whose target can start a replicated
 * cluster (`target.cluster`). A held lock must survive the leader's kill -9 with its token; a
 * lost majority must answer UNAVAILABLE within the backend's bound and grant nothing.
 */
/**
 * Killing and restarting members, then waiting up to `resumeAfterMajorityMs` for locking to
 * resume, does not fit vitest's 20 s default on a loaded CI machine (2 cores, real servers).
 */
const FAILOVER_TIMEOUT_MS = 60_000;

export function clusterGroup(name: string, start: () => Promise<ClusterTarget>): void {
  describe(`conformance: ${name}, cluster failover`, () => {
    const running = useService(start);

    it('a held lock survives kill -9 of the leader, and locking goes on after re-election', {
      timeout: FAILOVER_TIMEOUT_MS,
    }, async () => {
      const cluster = running();
      const { backend } = cluster;
      const heldTtlMs = cluster.heldTtlMs ?? 20_000;
      const lock = lockName('cluster-held');
      const held = await backend.tryAcquire({ name: lock, owner: 'holder', ttlMs: heldTtlMs });
      if (!held.granted) throw new Error('expected a grant');
      const leader = await cluster.waitForLeader();

      await leader.process.kill();
      const pauseMs = await timeUntilLockingWorks(backend, 15_000);
      console.log(
        `[${name}] locking resumed ${Math.round(pauseMs)} ms after kill -9 of the leader`,
      );
      expect(pauseMs).toBeLessThan(10_000);

      // The same lease (session, node) still holds it: same token, and nobody else gets it.
      expect((await backend.inspect(lock))?.token).toBe(held.grant.token);
      const intruder = await backend.tryAcquire({ name: lock, owner: 'intruder', ttlMs: 5_000 });
      expect(intruder.granted).toBe(false);
      const extended = await backend.extend({
        name: lock,
        token: held.grant.token,
        ttlMs: heldTtlMs,
      });
      expect(extended?.token).toBe(held.grant.token);
      // A new grant after the failover still gets a higher token.
      const after = await backend.tryAcquire({
        name: lockName('cluster-after'),
        owner: 'a',
        ttlMs: 5_000,
      });
      expect(after.granted && after.grant.token).toBeGreaterThan(held.grant.token);

      await leader.process.start();
    });

    it('with a majority down: UNAVAILABLE within the bound, nothing granted; locking resumes when members return', {
      timeout: FAILOVER_TIMEOUT_MS,
    }, async () => {
      const cluster = running();
      const { backend, commandTimeoutMs } = cluster;
      await cluster.waitForLeader();
      const before = await backend.tryAcquire({
        name: lockName('cluster-before'),
        owner: 'a',
        ttlMs: 5_000,
      });
      if (!before.granted) throw new Error('expected a grant');
      const [first, second] = cluster.members.filter((member) => member.process.running);
      await Promise.all([first!.process.kill(), second!.process.kill()]);

      const lock = lockName('cluster-outage');
      const waits: number[] = [];
      for (let i = 0; i < 3; i += 1) {
        const started = performance.now();
        const error = await backend.tryAcquire({ name: lock, owner: 'w', ttlMs: 5_000 }).then(
          () => undefined,
          (failure: unknown) => failure,
        );
        const elapsed = performance.now() - started;
        expect(isDlmError(error, 'UNAVAILABLE')).toBe(true);
        expect(elapsed).toBeLessThan(commandTimeoutMs + 500);
        waits.push(Math.round(elapsed));
      }
      // A release and an extend of the lock held since before: UNAVAILABLE within the bound too.
      for (const call of [
        () => backend.release({ name: before.grant.name, token: before.grant.token }),
        () => backend.extend({ name: before.grant.name, token: before.grant.token, ttlMs: 5_000 }),
      ]) {
        const started = performance.now();
        expect(await outcomeOf(call())).toBe('unavailable');
        const elapsed = performance.now() - started;
        expect(elapsed).toBeLessThan(commandTimeoutMs + 500);
        waits.push(Math.round(elapsed));
      }
      console.log(
        `[${name}] majority down: UNAVAILABLE after ${waits.join(', ')} ms (3 acquires, release, extend)`,
      );

      // Members come back together (each one alone is a minority and never serves).
      const restarted = performance.now();
      await Promise.all([first!.process.start(), second!.process.start()]);
      await timeUntilLockingWorks(backend, cluster.resumeAfterMajorityMs ?? 15_000);
      const resumeMs = Math.round(performance.now() - restarted);
      console.log(`[${name}] locking resumed ${resumeMs} ms after restarting the two members`);
      // Nothing asked for during the outage was granted.
      expect(await backend.inspect(lock)).toBeNull();
      const after = await backend.tryAcquire({ name: lock, owner: 'w', ttlMs: 5_000 });
      expect(after.granted && after.grant.token).toBeGreaterThan(before.grant.token);
    });
  });
}
