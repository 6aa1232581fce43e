import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, type DlmClient, isDlmError, type Lease } from '../src/index.js';
import { eventually, failOnUnhandledRejections, lockName, useServer } from './support.js';

failOnUnhandledRejections();

// Two servers over one backend: the holder talks to the first, the requester to the second.
const served = useServer();
let second: RunningServer;
let holder: DlmClient;
let asker: DlmClient;

beforeAll(async () => {
  second = await startServer({ port: 0, backend: served.backend });
  holder = createClient({ url: served.server.url });
  asker = createClient({ url: second.url });
});
afterAll(async () => {
  await holder.close();
  await asker.close();
  await second.close();
});

describe('release requests', () => {
  it("requestRelease through another server aborts the holder's releaseRequested, and releases nothing", async () => {
    const name = lockName('asked');
    const heard: Array<{ lease: Lease; reason?: string }> = [];
    const off = holder.on('releaseRequested', (event) => heard.push(event));
    await using lease = await holder.acquire(name, { ttlMs: 10_000 });
    const signal = lease.releaseRequested;
    expect(signal.aborted).toBe(false);
    expect(await asker.requestRelease(name, { reason: 'deploy 42' })).toEqual({
      name,
      notified: 1,
    });
    await eventually(() => signal.aborted);
    expect(isDlmError(signal.reason, 'CANCELLED')).toBe(true);
    expect((signal.reason as Error).message).toContain('deploy 42');
    expect(lease.releaseRequestReason).toBe('deploy 42');
    expect(heard).toEqual([{ lease, reason: 'deploy 42' }]);
    // Still held: asking is not taking.
    expect(lease.signal.aborted).toBe(false);
    expect(await asker.get(name)).toMatchObject({ held: true, token: lease.token });
    off();
  });

  it('a lease whose request came before releaseRequested was read reads it aborted', async () => {
    const name = lockName('asked-early');
    let heard = false;
    const off = holder.on('releaseRequested', (event) => {
      if (event.lease.name === name) heard = true;
    });
    await using lease = await holder.acquire(name, { ttlMs: 10_000 });
    await asker.requestRelease(name);
    await eventually(() => heard);
    // First read after the request came: made aborted, without a reason given.
    expect(lease.releaseRequested.aborted).toBe(true);
    expect(lease.releaseRequestReason).toBeUndefined();
    off();
  });

  it('withLock hands the callback releaseRequested; a waiting acquire with requestRelease gets the lock', async () => {
    const name = lockName('with-lock');
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const work = holder.withLock(name, { ttlMs: 10_000 }, async (_signal, lease, asked) => {
      entered();
      // Work until asked to let go, then return (withLock releases).
      await new Promise<void>((resolve) => asked.addEventListener('abort', () => resolve()));
      return lease.token;
    });
    await inside;
    await using next = await asker.acquire(name, {
      ttlMs: 10_000,
      waitMs: 10_000,
      requestRelease: true,
    });
    const first = await work;
    expect(next.token > first).toBe(true);
  });

  it('a reason over 256 bytes is INVALID_PARAMS naming reason, before anything is sent', async () => {
    const error = await asker
      .requestRelease(lockName('bad'), { reason: 'x'.repeat(257) })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'reason' } });
  });
});
