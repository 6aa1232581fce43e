import { describe, expect, it } from 'vitest';
import type { AcquireRequest, LockBackend } from '../src/backend.js';
import { createManualClock } from '../src/clock.js';
import type { LostEvent } from '../src/lock-service.js';
import { serviceScope, settle } from './service-scope.js';

/**
 * The real embedded backend seen as a store whose leases are coarser than a millisecond (etcd's
 * whole seconds): it keeps no cap itself, so its lease runs on past the cap, and only core's own
 * end at the cap stops it.
 */
function coarse(granularityMs: number) {
  return (real: LockBackend): LockBackend =>
    Object.create(real, {
      capabilities: {
        get: () => ({ ...real.capabilities, ttlGranularityMs: granularityMs, maxHold: true }),
      },
      tryAcquire: {
        value: ({ maxHoldMs: _kept, ...request }: AcquireRequest) => real.tryAcquire(request),
      },
    }) as LockBackend;
}

describe('caps on holding in core', () => {
  const openService = serviceScope();

  /** `owner` a's lease, capped at 5 s, extended after 1 s for 5 s more (past the cap). */
  async function extendedPastCap(granularityMs: number) {
    const clock = createManualClock(1_000);
    const service = await openService({ clock }, coarse(granularityMs));
    const lost: LostEvent[] = [];
    const onLost = (event: LostEvent) => lost.push(event);
    const lease = await service.acquire({
      name: 'capped',
      owner: 'a',
      ttlMs: 2_000,
      maxHoldMs: 5_000,
      onLost,
    });
    clock.advance(1_000);
    await service.extend({ name: 'capped', token: lease.token, ttlMs: 5_000 });
    clock.advance(3_999);
    await settle();
    expect(lost).toEqual([]);
    clock.advance(1);
    await settle();
    return { service, lease, lost };
  }

  it('on a backend with coarse leases, core ends the lease itself at its cap and its holder hears maxHold', async () => {
    const { service, lease, lost } = await extendedPastCap(1_000);
    expect(lost).toEqual([{ name: 'capped', token: lease.token, reason: 'maxHold' }]);
    // The store's own lease ran to 7 s: core released it at the cap (6 s).
    expect(await service.get('capped')).toBeNull();
  });

  it('where the backend counts milliseconds, core leaves the end to the backend (the control)', async () => {
    // This store ignores the cap, so nothing ends the lease at it: the test above can fail.
    const { service, lease, lost } = await extendedPastCap(1);
    expect(lost).toEqual([]);
    expect((await service.get('capped'))?.token).toBe(lease.token);
  });
});
