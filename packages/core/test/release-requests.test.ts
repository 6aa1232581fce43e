import { describe, expect, it } from 'vitest';
import type { LockBackend } from '../src/backend.js';
import type { ReleaseRequestedEvent } from '../src/release-requests.js';
import { serviceScope, settle } from './service-scope.js';

/** The backend without `requestRelease`: what a third-party adapter written before it offers. */
function withoutRequests({ requestRelease: _omitted, ...backend }: LockBackend): LockBackend {
  return backend;
}

describe('requestRelease on a backend without its own channel', () => {
  const openService = serviceScope();

  it("reaches the leases this service follows, through core's own delivery", async () => {
    const service = await openService({}, withoutRequests);
    expect(service.backend.requestRelease).toBeUndefined();
    const heard: ReleaseRequestedEvent[] = [];
    const lease = await service.acquire({
      name: 'r',
      owner: 'a',
      ttlMs: 10_000,
      onReleaseRequested: (event) => heard.push(event),
    });
    expect(await service.requestRelease({ name: 'r', reason: 'why' })).toEqual({
      name: 'r',
      notified: 1,
    });
    await settle();
    expect(heard).toEqual([{ name: 'r', token: lease.token, reason: 'why' }]);
    expect(service.holds('r', lease.token)).toBe(true);
  });

  it('tells the observer of a request made (with holders) and of each lease that heard it', async () => {
    const events: unknown[][] = [];
    const service = await openService(
      {
        observer: {
          releaseRequested: (request) => events.push(['asked', request]),
          releaseRequestHeard: (event) => events.push(['heard', event]),
        },
      },
      withoutRequests,
    );
    const lease = await service.acquire({ name: 'o', owner: 'a', ttlMs: 10_000 });
    await service.requestRelease({ name: 'o' });
    await service.requestRelease({ name: 'free' });
    await settle();
    expect(events).toEqual([
      ['heard', { name: 'o', token: lease.token }],
      ['asked', { name: 'o', notified: 1 }],
      ['asked', { name: 'free', notified: 0 }],
    ]);
  });
});
