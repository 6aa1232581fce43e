import { describe, expect, it } from 'vitest';
import { createManualClock } from '../src/clock.js';
import type { AroundBackendCall } from '../src/observer.js';
import { serviceScope, settle } from './service-scope.js';

/** A wrapper that records the calls it runs, tagged with whose request they were. */
function around(tag: string, calls: string[]): AroundBackendCall {
  return (operation, call) => {
    calls.push(`${tag}:${operation}:start`);
    return call().then(
      (value) => {
        calls.push(`${tag}:${operation}:ok`);
        return value;
      },
      (error: unknown) => {
        calls.push(`${tag}:${operation}:failed`);
        throw error;
      },
    );
  };
}

describe('aroundBackendCall', () => {
  const openService = serviceScope();
  const open = () => openService({ clock: createManualClock(1_000) });

  it("runs each request's backend calls through that request's own wrapper", async () => {
    const service = await open();
    const calls: string[] = [];
    const lease = await service.acquire({
      name: 'a',
      owner: 'o',
      ttlMs: 1_000,
      aroundBackendCall: around('acquire', calls),
    });
    await service.extend({
      name: 'a',
      token: lease.token,
      ttlMs: 1_000,
      leaseKey: lease.leaseKey,
      aroundBackendCall: around('extend', calls),
    });
    await service.release({
      name: 'a',
      token: lease.token,
      leaseKey: lease.leaseKey,
      aroundBackendCall: around('release', calls),
    });
    expect(calls).toEqual([
      'acquire:tryAcquire:start',
      'acquire:tryAcquire:ok',
      'extend:extend:start',
      'extend:extend:ok',
      'release:release:start',
      'release:release:ok',
    ]);
  });

  it("a waiter's retry after a release goes through the waiter's wrapper, not the releaser's", async () => {
    const service = await open();
    const calls: string[] = [];
    const first = await service.acquire({ name: 'q', owner: 'one', ttlMs: 1_000 });
    const second = service.acquire({
      name: 'q',
      owner: 'two',
      ttlMs: 1_000,
      waitMs: 5_000,
      aroundBackendCall: around('waiter', calls),
    });
    await settle();
    await service.release({
      name: 'q',
      token: first.token,
      leaseKey: first.leaseKey,
      aroundBackendCall: around('releaser', calls),
    });
    const lease = await second;
    expect(lease.owner).toBe('two');
    // The waiter tried once on arrival (held), and once more when the release woke it.
    expect(calls.filter((call) => call.startsWith('waiter:'))).toEqual([
      'waiter:tryAcquire:start',
      'waiter:tryAcquire:ok',
      'waiter:tryAcquire:start',
      'waiter:tryAcquire:ok',
    ]);
    expect(calls.filter((call) => call.startsWith('releaser:'))).toEqual([
      'releaser:release:start',
      'releaser:release:ok',
    ]);
  });
});
