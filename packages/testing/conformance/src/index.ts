import {
  type BackendCapabilities,
  createLeaseKey,
  createLockService,
  type DlmError,
  hashLeaseKey,
  isDlmError,
  type Lease,
  type LockBackend,
  type LockChange,
  type LockService,
  type LostEvent,
} from '@dlm/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

export interface ConformanceTarget {
  /** A new backend instance connected to the service under test; called once per test. */
  backend: () => LockBackend | Promise<LockBackend>;
  /** Run after each test with the instance it used (default: `backend.close()`). */
  cleanup?: (backend: LockBackend) => Promise<void>;
  /**
   * For backends with `durableAcrossRestart`: crash the service (kill -9 where possible) and
   * start it again with its data; `backend()` afterwards talks to the new one.
   */
  restart?: () => Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let unique = 0;
/** Each test uses its own names, so suites never need to flush the backend. */
function lockName(label: string): string {
  unique += 1;
  return `conformance/${label}/${process.pid}-${Date.now().toString(36)}-${unique}`;
}

async function failure(promise: Promise<unknown>): Promise<DlmError> {
  try {
    await promise;
  } catch (error) {
    if (isDlmError(error)) return error;
    throw error;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** The shortest lease worth testing expiry with, on this backend's granularity. */
function shortTtl(caps: BackendCapabilities): number {
  const wanted = Math.max(caps.minTtlMs, 300);
  return Math.ceil(wanted / caps.ttlGranularityMs) * caps.ttlGranularityMs;
}

/** How long after a lease's end a backend may still need to notice it ended. */
function expirySlack(caps: BackendCapabilities): number {
  return caps.ttlGranularityMs + 1_500;
}

/**
 * Registers the dlm backend conformance suite with vitest. Every test runs through core's
 * `LockService` over a fresh backend instance, so it checks the adapter's primitives and the
 * waits, fairness and lock-lost detection core builds on them. Groups are gated by the
 * backend's declared capabilities, never by its name.
 *
 * @example
 * runConformance('redis', { backend: () => redisBackend({ url }) });
 */
export function runConformance(name: string, target: ConformanceTarget): void {
  describe(`conformance: ${name}`, () => {
    let backend: LockBackend;
    let service: LockService;
    let caps: BackendCapabilities;
    const extraServices: LockService[] = [];
    const cleanup = target.cleanup ?? ((b: LockBackend) => b.close());

    beforeEach(async () => {
      backend = await target.backend();
      caps = backend.capabilities;
      service = createLockService({ backend });
    });

    afterEach(async () => {
      for (const extra of extraServices.splice(0)) {
        await extra.close();
        await cleanup(extra.backend);
      }
      await service.close();
      await cleanup(backend);
    });

    describe('grants', () => {
      it('grants a free lock with a positive token and at least the requested lease', async () => {
        const name = lockName('grant');
        const lease = await service.acquire({ name, owner: 'a', ttlMs: 5_000 });
        expect(lease.token).toBeGreaterThan(0n);
        expect(lease.ttlMs).toBeGreaterThanOrEqual(5_000);
        expect(lease.owner).toBe('a');
        const state = await service.get(name);
        expect(state?.token).toBe(lease.token);
        expect(state?.owner).toBe('a');
        expect(state?.ttlRemainingMs).toBeGreaterThan(0);
        expect(state?.ttlRemainingMs).toBeLessThanOrEqual(lease.ttlMs);
      });

      it('mutual exclusion: of many concurrent contenders exactly one is granted', async () => {
        const name = lockName('mutex');
        const attempts = Array.from({ length: 25 }, (_, i) =>
          service.acquire({ name, owner: `owner-${i}`, ttlMs: 10_000 }).then(
            (lease) => lease,
            (error: unknown) => {
              if (isDlmError(error, 'LOCK_HELD')) return null;
              throw error;
            },
          ),
        );
        const leases = (await Promise.all(attempts)).filter((lease) => lease !== null);
        expect(leases).toHaveLength(1);
      });

      it('mutual exclusion holds across independent service instances', async () => {
        const name = lockName('mutex-instances');
        const others = await Promise.all(
          Array.from({ length: 3 }, async () => {
            const other = createLockService({ backend: await target.backend() });
            extraServices.push(other);
            return other;
          }),
        );
        const all = [service, ...others];
        const results = await Promise.allSettled(
          all.flatMap((svc, s) =>
            Array.from({ length: 5 }, (_, i) =>
              svc.acquire({ name, owner: `s${s}-${i}`, ttlMs: 10_000 }),
            ),
          ),
        );
        const granted = results.filter((r) => r.status === 'fulfilled');
        expect(granted.length).toBeLessThanOrEqual(1);
        if (granted.length === 0) {
          // Independent nodes (Redlock) can split the vote so that nobody has a quorum: legal
          // only for a best-effort backend, and the lock must then still be free to take.
          expect(caps.fencing).toBe('best-effort');
          const after = await service.acquire({
            name,
            owner: 'after',
            ttlMs: 10_000,
            waitMs: 5_000,
          });
          expect(after.token).toBeGreaterThan(0n);
        }
      });

      it('idempotent re-acquire by the same owner returns the same token and refreshes the lease', async () => {
        const name = lockName('reacquire');
        const first = await service.acquire({ name, owner: 'same', ttlMs: 5_000 });
        const second = await service.acquire({ name, owner: 'same', ttlMs: 5_000 });
        expect(second.token).toBe(first.token);
        const third = await service.acquire({ name, owner: 'same', ttlMs: 5_000, waitMs: 1_000 });
        expect(third.token).toBe(first.token);
      });

      it('try-lock on a held lock fails at once with LOCK_HELD and the remaining lease', async () => {
        const name = lockName('trylock');
        await service.acquire({ name, owner: 'holder', ttlMs: 10_000 });
        const started = performance.now();
        const error = await failure(
          service.acquire({
            name,
            owner: 'other',
            ttlMs: Math.max(1_000, service.limits.minTtlMs),
          }),
        );
        expect(error.code).toBe('LOCK_HELD');
        expect(error.retryable).toBe(true);
        expect(performance.now() - started).toBeLessThan(1_000);
        if (error.details.ttlRemainingMs !== undefined) {
          expect(error.details.ttlRemainingMs).toBeGreaterThan(0);
          expect(error.details.ttlRemainingMs).toBeLessThanOrEqual(10_000 + caps.ttlGranularityMs);
        }
      });
    });

    describe('release and extend', () => {
      it('only the holder releases: a wrong token gets NOT_HOLDER and the lock stays', async () => {
        const name = lockName('release');
        const lease = await service.acquire({ name, owner: 'a', ttlMs: 10_000 });
        const error = await failure(service.release({ name, token: lease.token + 1000n }));
        expect(error.code).toBe('NOT_HOLDER');
        expect((await service.get(name))?.token).toBe(lease.token);
        await service.release({ name, token: lease.token });
        expect(await service.get(name)).toBeNull();
        expect((await failure(service.release({ name, token: lease.token }))).code).toBe(
          'NOT_HOLDER',
        );
      });

      it('only the holder extends, and extend resets the lease', async () => {
        const name = lockName('extend');
        const ttl = shortTtl(caps);
        const lease = await service.acquire({ name, owner: 'a', ttlMs: ttl });
        expect(
          (await failure(service.extend({ name, token: lease.token + 1000n, ttlMs: ttl }))).code,
        ).toBe('NOT_HOLDER');
        const extended = await service.extend({ name, token: lease.token, ttlMs: 10_000 });
        expect(extended.token).toBe(lease.token);
        expect(extended.ttlMs).toBeGreaterThanOrEqual(10_000);
        await sleep(ttl + expirySlack(caps));
        const state = await service.get(name);
        expect(state?.token).toBe(lease.token);
      });

      it("release(token) by a stale holder leaves the new holder's lock", async () => {
        const name = lockName('stale');
        const ttl = shortTtl(caps);
        const stale = await service.acquire({ name, owner: 'old', ttlMs: ttl });
        await sleep(ttl + expirySlack(caps));
        const fresh = await service.acquire({ name, owner: 'new', ttlMs: 10_000, waitMs: 5_000 });
        expect(fresh.token).toBeGreaterThan(stale.token);
        expect((await failure(service.release({ name, token: stale.token }))).code).toBe(
          'NOT_HOLDER',
        );
        expect((await failure(service.extend({ name, token: stale.token, ttlMs: ttl }))).code).toBe(
          'NOT_HOLDER',
        );
        const state = await service.get(name);
        expect(state?.owner).toBe('new');
        expect(state?.token).toBe(fresh.token);
      });
    });

    describe('only the holder (lease key)', () => {
      /** A second service over the same backend: another dlm server of the deployment. */
      async function otherServer(): Promise<LockService> {
        const other = createLockService({ backend: await target.backend() });
        extraServices.push(other);
        return other;
      }

      it('release and extend with the token but without the key, from another server, are NOT_HOLDER', async () => {
        const name = lockName('key-token-only');
        const lease = await service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
        const other = await otherServer();
        // Everything a non-holder can learn: the token and owner (lock.get shows both).
        const seen = await other.get(name);
        expect(seen?.token).toBe(lease.token);
        expect((await failure(other.release({ name, token: lease.token }))).code).toBe(
          'NOT_HOLDER',
        );
        expect(
          (await failure(other.extend({ name, token: lease.token, ttlMs: 10_000 }))).code,
        ).toBe('NOT_HOLDER');
        const wrongKey = createLeaseKey();
        expect(
          (await failure(other.release({ name, token: lease.token, leaseKey: wrongKey }))).code,
        ).toBe('NOT_HOLDER');
        expect(
          (
            await failure(
              service.extend({ name, token: lease.token, ttlMs: 10_000, leaseKey: wrongKey }),
            )
          ).code,
        ).toBe('NOT_HOLDER');
        const state = await service.get(name);
        expect(state?.token).toBe(lease.token);
        expect(state?.owner).toBe('holder-1');
        // The holder itself still can (the service that granted it, without the key).
        await service.extend({ name, token: lease.token, ttlMs: 10_000 });
        await service.release({ name, token: lease.token });
        expect(await service.get(name)).toBeNull();
      });

      it("a wrong key on the granting server leaves the holder's lease as it was, lock.lost included", async () => {
        const name = lockName('key-wrong-here');
        const lost: LostEvent[] = [];
        const ttlMs = shortTtl(caps);
        const lease = await service.acquire({
          name,
          owner: 'holder-1',
          ttlMs,
          onLost: (event) => lost.push(event),
        });
        const wrongKey = createLeaseKey();
        expect(
          (await failure(service.release({ name, token: lease.token, leaseKey: wrongKey }))).code,
        ).toBe('NOT_HOLDER');
        // Still the holder's: its keyless extend works, and it hears the lease end.
        await service.extend({ name, token: lease.token, ttlMs });
        await sleep(ttlMs + expirySlack(caps));
        expect(lost).toHaveLength(1);
        expect(lost[0]).toMatchObject({ name, token: lease.token, reason: 'expired' });
      });

      it('release and extend with the key work from another server (a holder that reconnected)', async () => {
        const name = lockName('key-other-server');
        const lease = await service.acquire({ name, owner: 'holder-1', ttlMs: shortTtl(caps) });
        const other = await otherServer();
        const { leaseKey } = lease;
        const extended = await other.extend({ name, token: lease.token, ttlMs: 10_000, leaseKey });
        expect(extended.token).toBe(lease.token);
        expect(extended.ttlMs).toBeGreaterThanOrEqual(10_000);
        await sleep(shortTtl(caps) + expirySlack(caps));
        expect((await service.get(name))?.token).toBe(lease.token);
        await other.release({ name, token: lease.token, leaseKey });
        expect(await service.get(name)).toBeNull();
      });

      it('a wrong key gets the same NOT_HOLDER message as a token that no longer holds', async () => {
        const name = lockName('key-message');
        const lease = await service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
        const other = await otherServer();
        const wrongKey = await failure(
          other.release({ name, token: lease.token, leaseKey: createLeaseKey() }),
        );
        const noKey = await failure(other.release({ name, token: lease.token }));
        await service.release({ name, token: lease.token, leaseKey: lease.leaseKey });
        const released = await failure(
          other.release({ name, token: lease.token, leaseKey: lease.leaseKey }),
        );
        expect(wrongKey.code).toBe('NOT_HOLDER');
        expect(wrongKey.message).toBe(released.message);
        expect(noKey.message).toBe(released.message);
        expect(wrongKey.message).not.toContain(lease.leaseKey);
      });

      it('re-acquire by owner from another server: LOCK_HELD without the key, the same lease with it', async () => {
        const name = lockName('key-reacquire');
        const lease = await service.acquire({ name, owner: 'holder-1', ttlMs: 10_000 });
        const other = await otherServer();
        const stolen = await failure(other.acquire({ name, owner: 'holder-1', ttlMs: 10_000 }));
        expect(stolen.code).toBe('LOCK_HELD');
        const guessed = await failure(
          other.acquire({ name, owner: 'holder-1', ttlMs: 10_000, leaseKey: createLeaseKey() }),
        );
        expect(guessed.code).toBe('LOCK_HELD');
        // On the granting server too: a different key for the same owner is another requester.
        expect(
          (
            await failure(
              service.acquire({
                name,
                owner: 'holder-1',
                ttlMs: 10_000,
                leaseKey: createLeaseKey(),
              }),
            )
          ).code,
        ).toBe('LOCK_HELD');
        const again = await other.acquire({
          name,
          owner: 'holder-1',
          ttlMs: 10_000,
          leaseKey: lease.leaseKey,
        });
        expect(again.token).toBe(lease.token);
        expect(again.leaseKey).toBe(lease.leaseKey);
        // A re-sent acquire that waits (after a lost reply) learns the same outcome.
        const waited = await other.acquire({
          name,
          owner: 'holder-1',
          ttlMs: 10_000,
          waitMs: 2_000,
          leaseKey: lease.leaseKey,
        });
        expect(waited.token).toBe(lease.token);
        // A waiting impostor (owner, no key) is a different requester: it waits and times out.
        const impostor = await otherServer();
        const waiting = await failure(
          impostor.acquire({ name, owner: 'holder-1', ttlMs: 10_000, waitMs: 300 }),
        );
        expect(waiting.code).toBe('LOCK_HELD');
        expect((await service.get(name))?.token).toBe(lease.token);
      });

      it('a client-chosen key is kept, a fresh one is made otherwise, and neither shows in get or watch', async () => {
        const name = lockName('key-hidden');
        const changes: LockChange[] = [];
        const other = await otherServer();
        const stop = other.watch(name, (change) => changes.push(change));
        const chosen = createLeaseKey();
        const lease = await service.acquire({
          name,
          owner: 'holder-1',
          ttlMs: 10_000,
          leaseKey: chosen,
        });
        expect(lease.leaseKey).toBe(chosen);
        const state = await other.get(name);
        await service.release({ name, token: lease.token, leaseKey: chosen });
        const made = await service.acquire({ name, owner: 'holder-2', ttlMs: 10_000 });
        expect(made.leaseKey).toMatch(/^[A-Za-z0-9_-]{22,128}$/);
        expect(made.leaseKey).not.toBe(chosen);
        const listed = (await service.backend.list?.('conformance/key-hidden/')) ?? [];
        await service.release({ name, token: made.token });
        const deadline = performance.now() + 2_000;
        while (changes.filter((c) => !c.held).length < 2 && performance.now() < deadline) {
          await sleep(20);
        }
        stop();
        const seen = JSON.stringify([state, changes, listed], (_, v) =>
          typeof v === 'bigint' ? v.toString() : v,
        );
        for (const secret of [chosen, made.leaseKey]) {
          expect(seen).not.toContain(secret);
          expect(seen).not.toContain(hashLeaseKey(secret));
        }
      });
    });

    describe('expiry', () => {
      it('an unreleased lease expires and the lock is free again', async () => {
        const name = lockName('expiry');
        const ttl = shortTtl(caps);
        await service.acquire({ name, owner: 'a', ttlMs: ttl });
        await sleep(ttl + expirySlack(caps));
        const next = await service.acquire({ name, owner: 'b', ttlMs: 5_000 });
        expect(next.owner).toBe('b');
      });

      it('tokens strictly increase across release and expiry', async () => {
        const name = lockName('tokens');
        const ttl = shortTtl(caps);
        const tokens: bigint[] = [];
        for (let i = 0; i < 3; i += 1) {
          const lease = await service.acquire({ name, owner: `r${i}`, ttlMs: 5_000 });
          tokens.push(lease.token);
          await service.release({ name, token: lease.token });
        }
        const expiring = await service.acquire({ name, owner: 'x', ttlMs: ttl });
        tokens.push(expiring.token);
        await sleep(ttl + expirySlack(caps));
        tokens.push(
          (await service.acquire({ name, owner: 'y', ttlMs: 5_000, waitMs: 5_000 })).token,
        );
        for (let i = 1; i < tokens.length; i += 1) {
          expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
        }
      });

      it('get reports the lease left by the clock, and nothing once it has run out', async () => {
        const name = lockName('clock');
        const ttl = Math.max(shortTtl(caps), 2 * caps.ttlGranularityMs + 1_000);
        const lease = await service.acquire({ name, owner: 'a', ttlMs: ttl });
        const first = await service.get(name);
        const waitMs = caps.ttlGranularityMs + 300;
        await sleep(waitMs);
        const second = await service.get(name);
        expect(first?.token).toBe(lease.token);
        expect(second?.token).toBe(lease.token);
        expect(second!.ttlRemainingMs).toBeGreaterThan(0);
        // The lease left shrinks as time passes (to the backend's granularity).
        expect(second!.ttlRemainingMs).toBeLessThanOrEqual(
          first!.ttlRemainingMs - waitMs + caps.ttlGranularityMs + 50,
        );
        await sleep(second!.ttlRemainingMs + expirySlack(caps));
        expect(await service.get(name)).toBeNull();
      });

      it('the holder is told lock.lost (expired) within its lease plus a small bound', async () => {
        const name = lockName('lost');
        const ttl = shortTtl(caps);
        const lost: Array<{ event: LostEvent; at: number }> = [];
        const started = performance.now();
        await service.acquire({
          name,
          owner: 'a',
          ttlMs: ttl,
          onLost: (event) => lost.push({ event, at: performance.now() }),
        });
        await sleep(ttl + expirySlack(caps));
        expect(lost).toHaveLength(1);
        expect(lost[0]!.event.reason).toBe('expired');
        expect(lost[0]!.event.name).toBe(name);
        expect(lost[0]!.at - started).toBeGreaterThanOrEqual(ttl - 50);
      });
    });

    describe('waiting', () => {
      it('a wait ends at its deadline with LOCK_HELD', async () => {
        const name = lockName('deadline');
        await service.acquire({ name, owner: 'holder', ttlMs: 20_000 });
        const started = performance.now();
        const error = await failure(
          service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 400 }),
        );
        const elapsed = performance.now() - started;
        expect(error.code).toBe('LOCK_HELD');
        expect(elapsed).toBeGreaterThanOrEqual(380);
        expect(elapsed).toBeLessThan(2_500);
      });

      it('a waiter is woken promptly on release (event-driven, not at the lease end)', async () => {
        const name = lockName('wake');
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const waiting = service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
        await sleep(150);
        const releasedAt = performance.now();
        await service.release({ name, token: holder.token });
        const granted = await waiting;
        const wakeMs = performance.now() - releasedAt;
        expect(granted.owner).toBe('waiter');
        expect(granted.token).toBeGreaterThan(holder.token);
        expect(wakeMs).toBeLessThan(1_000);
      });

      it('a waiter on another service instance is woken by the release notification', async () => {
        const name = lockName('wake-remote');
        const other = createLockService({ backend: await target.backend() });
        extraServices.push(other);
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const waiting = other.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
        await sleep(200);
        const releasedAt = performance.now();
        await service.release({ name, token: holder.token });
        const granted = await waiting;
        expect(granted.owner).toBe('waiter');
        expect(performance.now() - releasedAt).toBeLessThan(1_500);
      });

      it('waiters are granted in FIFO order', async () => {
        const name = lockName('fifo');
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const order: string[] = [];
        const waiters = Array.from({ length: 6 }, (_, i) =>
          service
            .acquire({ name, owner: `w${i}`, ttlMs: 10_000, waitMs: 20_000 })
            .then(async (lease) => {
              order.push(lease.owner);
              await sleep(10);
              await service.release({ name, token: lease.token });
            }),
        );
        await sleep(100);
        await service.release({ name, token: holder.token });
        await Promise.all(waiters);
        expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
      });

      it('with a fair queue, waiters on different service instances are granted in arrival order', async (ctx) => {
        if (!caps.fairQueue) ctx.skip();
        const name = lockName('fair-across');
        const services = [service];
        for (let i = 0; i < 2; i += 1) {
          const other = createLockService({ backend: await target.backend() });
          extraServices.push(other);
          services.push(other);
        }
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const order: string[] = [];
        const waiters: Promise<void>[] = [];
        for (let i = 0; i < 6; i += 1) {
          const svc = services[i % services.length]!;
          waiters.push(
            svc
              .acquire({ name, owner: `w${i}`, ttlMs: 10_000, waitMs: 30_000 })
              .then(async (lease) => {
                order.push(lease.owner);
                await sleep(10);
                await svc.release({ name, token: lease.token });
              }),
          );
          // Let each waiter take its place in the backend's queue before the next arrives.
          await sleep(150);
        }
        await service.release({ name, token: holder.token });
        await Promise.all(waiters);
        expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4', 'w5']);
      });

      it('a waiter whose holder expires is granted after the lease ends', async () => {
        const name = lockName('wait-expiry');
        const ttl = shortTtl(caps);
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: ttl });
        const started = performance.now();
        const lease = await service.acquire({
          name,
          owner: 'waiter',
          ttlMs: 5_000,
          waitMs: ttl + 10_000,
        });
        expect(lease.token).toBeGreaterThan(holder.token);
        expect(performance.now() - started).toBeLessThan(ttl + expirySlack(caps) + 1_000);
      });

      it('an aborted wait ends with CANCELLED and is never granted later', async () => {
        const name = lockName('abort');
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const controller = new AbortController();
        const waiting = failure(
          service.acquire({
            name,
            owner: 'quitter',
            ttlMs: 5_000,
            waitMs: 20_000,
            signal: controller.signal,
          }),
        );
        await sleep(50);
        controller.abort();
        expect((await waiting).code).toBe('CANCELLED');
        await service.release({ name, token: holder.token });
        await sleep(200);
        const next = await service.acquire({ name, owner: 'next', ttlMs: 5_000 });
        expect(next.owner).toBe('next');
        expect(service.waiters(name)).toBe(0);
      });

      it('a try-lock does not jump the queue of waiters', async () => {
        const name = lockName('no-barging');
        const holder = await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const waiting = service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 });
        await sleep(50);
        expect((await failure(service.acquire({ name, owner: 'barger', ttlMs: 5_000 }))).code).toBe(
          'LOCK_HELD',
        );
        await service.release({ name, token: holder.token });
        expect((await waiting).owner).toBe('waiter');
      });

      it('closing the service ends waits with CANCELLED', async () => {
        const name = lockName('close');
        await service.acquire({ name, owner: 'holder', ttlMs: 30_000 });
        const waiting = failure(
          service.acquire({ name, owner: 'waiter', ttlMs: 5_000, waitMs: 20_000 }),
        );
        await sleep(50);
        await service.close();
        expect((await waiting).code).toBe('CANCELLED');
      });
    });

    describe('watch and revoke', () => {
      it('watch reports grants and releases', async () => {
        const name = lockName('watch');
        const changes: LockChange[] = [];
        const stop = service.watch(name, (change) => changes.push(change));
        // As the server's lock.watch does: subscribe, then read the state, then report.
        expect(await service.get(name)).toBeNull();
        const other = createLockService({ backend: await target.backend() });
        extraServices.push(other);
        const lease = await other.acquire({ name, owner: 'a', ttlMs: 10_000 });
        // Held for a moment: a grant released within one event round trip may reach watchers
        // only as its release (ZooKeeper's one-shot watches see the two writes as one change).
        await sleep(200);
        await other.release({ name, token: lease.token });
        const deadline = performance.now() + 2_000;
        while (!changes.some((c) => !c.held) && performance.now() < deadline) await sleep(20);
        stop();
        expect(changes.at(-1)).toMatchObject({ name, held: false, type: 'released' });
        // The protocol promises a change on every grant, whatever the backend.
        expect(changes.find((c) => c.held)).toMatchObject({
          held: true,
          type: 'acquired',
          token: lease.token,
          owner: 'a',
        });
      });

      it('watch reports an expiry within the lease plus a small bound, on every instance', async () => {
        const name = lockName('watch-expiry');
        const ttl = shortTtl(caps);
        const newInstance = async () => {
          const other = createLockService({ backend: await target.backend() });
          extraServices.push(other);
          return other;
        };
        const [remote, late] = [await newInstance(), await newInstance()];
        const ends = new Map<string, { change: LockChange; at: number }>();
        const follow = (label: string, svc: LockService) =>
          svc.watch(name, (change) => {
            if (!change.held && !ends.has(label))
              ends.set(label, { change, at: performance.now() });
          });
        // Watchers on the granting instance and on another one, watching before the grant...
        const stops = [follow('granting', service), follow('remote', remote)];
        const started = performance.now();
        const lease = await service.acquire({ name, owner: 'a', ttlMs: ttl });
        // ...and one on a third instance that starts watching only once the lock is held.
        await sleep(Math.min(100, ttl / 3));
        stops.push(follow('late', late));
        const deadline = started + ttl + expirySlack(caps);
        while (ends.size < 3 && performance.now() < deadline) await sleep(10);
        for (const stop of stops) stop();
        for (const label of ['granting', 'remote', 'late']) {
          const end = ends.get(label);
          expect(end, `the ${label} watcher heard the expiry`).toBeDefined();
          expect(end!.change).toMatchObject({
            name,
            held: false,
            type: 'expired',
            token: lease.token,
          });
          expect(end!.at - started).toBeGreaterThanOrEqual(ttl - 50);
        }
      });

      it('a watcher on another instance hears a lease extended there end only when it runs out', async () => {
        const name = lockName('watch-extended');
        const ttl = shortTtl(caps);
        const remote = createLockService({ backend: await target.backend() });
        extraServices.push(remote);
        const changes: LockChange[] = [];
        const stop = remote.watch(name, (change) => changes.push(change));
        const lease = await service.acquire({ name, owner: 'a', ttlMs: ttl });
        const longer = ttl + 2 * expirySlack(caps);
        await service.extend({ name, token: lease.token, ttlMs: longer });
        const extendedAt = performance.now();
        await sleep(ttl + expirySlack(caps) / 2);
        // Past the first deadline, the lease still runs: no watcher may have been told it ended.
        expect(changes.filter((c) => !c.held)).toEqual([]);
        const deadline = extendedAt + longer + expirySlack(caps);
        while (!changes.some((c) => !c.held) && performance.now() < deadline) await sleep(10);
        stop();
        expect(changes.find((c) => !c.held)).toMatchObject({ held: false, type: 'expired' });
        expect(performance.now() - extendedAt).toBeGreaterThanOrEqual(longer - 50);
      });

      it('revoke ends the lease: the holder is told revoked, the next waiter gets a higher token', async () => {
        const name = lockName('revoke');
        const lost: LostEvent[] = [];
        const holder = await service.acquire({
          name,
          owner: 'a',
          ttlMs: 30_000,
          onLost: (e) => lost.push(e),
        });
        const waiting = service.acquire({ name, owner: 'b', ttlMs: 5_000, waitMs: 10_000 });
        await sleep(50);
        const revoked = await service.revoke(name);
        expect(revoked?.token).toBe(holder.token);
        const next = await waiting;
        expect(next.token).toBeGreaterThan(holder.token);
        expect(lost).toEqual([{ name, token: holder.token, reason: 'revoked' }]);
        expect((await failure(service.release({ name, token: holder.token }))).code).toBe(
          'NOT_HOLDER',
        );
      });
    });

    describe('bad input', () => {
      const cases: Array<[string, Record<string, unknown>, string]> = [
        ['an empty name', { name: '' }, 'name'],
        ['a name over 256 bytes', { name: 'x'.repeat(257) }, 'name'],
        ['a name with a control character', { name: 'a\u0000b' }, 'name'],
        ['a name that is not a string', { name: 7 }, 'name'],
        ['a ttl below the minimum', { ttlMs: 1 }, 'ttlMs'],
        ['a ttl that is not an integer', { ttlMs: 1000.5 }, 'ttlMs'],
        ['a ttl above the maximum', { ttlMs: 86_400_001 }, 'ttlMs'],
        ['a negative wait', { waitMs: -1 }, 'waitMs'],
        ['an empty owner', { owner: '' }, 'owner'],
        ['a lease key shorter than 22 characters', { leaseKey: 'short' }, 'leaseKey'],
        [
          'a lease key with a character outside [A-Za-z0-9_-]',
          { leaseKey: `${'a'.repeat(30)}=` },
          'leaseKey',
        ],
        ['a lease key over 128 characters', { leaseKey: 'k'.repeat(129) }, 'leaseKey'],
      ];
      for (const [label, patch, field] of cases) {
        it(`acquire with ${label} is INVALID_PARAMS naming ${field}`, async () => {
          const request = {
            name: lockName('bad'),
            owner: 'a',
            ttlMs: 5_000,
            ...patch,
          } as Parameters<LockService['acquire']>[0];
          const error = await failure(service.acquire(request));
          expect(error.code).toBe('INVALID_PARAMS');
          expect(error.details.field).toBe(field);
        });
      }

      it('release and extend with an out-of-range token are INVALID_PARAMS', async () => {
        const name = lockName('bad-token');
        for (const token of [0n, -1n, 2n ** 63n]) {
          expect((await failure(service.release({ name, token }))).details.field).toBe('token');
          expect((await failure(service.extend({ name, token, ttlMs: 5_000 }))).details.field).toBe(
            'token',
          );
        }
      });
    });

    describe('durability', () => {
      it('tokens keep increasing and held locks stay held across a backend restart', async (ctx) => {
        if (!caps.durableAcrossRestart || !target.restart) ctx.skip();
        const released = lockName('durable-released');
        const held = lockName('durable-held');
        const first = await service.acquire({ name: released, owner: 'a', ttlMs: 5_000 });
        await service.release({ name: released, token: first.token });
        const holder: Lease = await service.acquire({ name: held, owner: 'holder', ttlMs: 60_000 });
        await service.close();
        await cleanup(backend).catch(() => {});
        await target.restart!();
        backend = await target.backend();
        service = createLockService({ backend });
        const after = await service.acquire({ name: released, owner: 'b', ttlMs: 5_000 });
        expect(after.token).toBeGreaterThan(first.token);
        expect(
          (await failure(service.acquire({ name: held, owner: 'intruder', ttlMs: 5_000 }))).code,
        ).toBe('LOCK_HELD');
        // A restarted service has not granted it: the key proves holding.
        expect((await failure(service.release({ name: held, token: holder.token }))).code).toBe(
          'NOT_HOLDER',
        );
        await service.release({ name: held, token: holder.token, leaseKey: holder.leaseKey });
      });
    });
  });
}
