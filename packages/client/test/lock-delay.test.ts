import { isDlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { lockName, sleep, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

/** The error `promise` rejects with (a DlmError), or a failure of the test. */
async function refusal(promise: Promise<unknown>) {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  if (!isDlmError(error)) throw new Error(`expected a DlmError, got ${String(error)}`);
  return error;
}

describe('lockDelayMs', () => {
  it('holds the name back after an expiry: LOCK_HELD with lockDelayRemainingMs, get says so, a wait is granted after', async () => {
    const a = client();
    const b = client();
    const name = lockName('lock-delay');
    const lease = await a.acquire(name, { ttlMs: 300, lockDelayMs: 1_500 });
    const endsAt = performance.now() + 300;
    await sleep(500);
    const refused = await refusal(b.acquire(name, { ttlMs: 5_000 }));
    expect(refused.code).toBe('LOCK_HELD');
    expect(refused.details.lockDelayRemainingMs).toBeGreaterThan(0);
    expect(refused.details.lockDelayRemainingMs).toBeLessThanOrEqual(1_500);
    const info = await b.get(name);
    expect(info.held).toBe(false);
    expect(!info.held && info.lockDelayRemainingMs).toBeGreaterThan(0);
    const next = await b.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
    expect(performance.now() - endsAt).toBeGreaterThanOrEqual(1_450);
    expect(next.token).toBeGreaterThan(lease.token);
    await next.release();
  });

  it('checks lockDelayMs before sending: over the limit is INVALID_PARAMS naming it', async () => {
    const a = client();
    await a.get(lockName('connect'));
    const error = await refusal(a.acquire(lockName('bad'), { ttlMs: 5_000, lockDelayMs: 60_001 }));
    expect([error.code, error.details.field]).toEqual(['INVALID_PARAMS', 'lockDelayMs']);
  });
});
