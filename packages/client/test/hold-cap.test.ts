import { isDlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { lockName, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

describe('maxHoldMs', () => {
  it('an auto-extended lease stops at its cap: the last extend is granted up to it, and it is lost with reason maxHold', async () => {
    const a = client();
    const b = client();
    const name = lockName('hold-cap');
    const startedAt = performance.now();
    const lease = await a.acquire(name, { ttlMs: 400, maxHoldMs: 1_500, autoExtend: true });
    await new Promise<void>((resolve) => {
      lease.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    const heldMs = performance.now() - startedAt;
    expect(lease.lost).toBe('maxHold');
    // Renewed past its TTL, and never past its cap.
    expect(heldMs).toBeGreaterThan(1_000);
    expect(heldMs).toBeLessThanOrEqual(1_500 + 50);
    expect(lease.ttlMs).toBeLessThan(400);
    // The server ends it at the cap (the client did not release it): then it is free.
    const next = await b.acquire(name, { ttlMs: 5_000, waitMs: 2_000 });
    expect(next.token).toBeGreaterThan(lease.token);
    await next.release();
  });

  it('checks maxHoldMs before sending: below ttlMs, or above the limit, is INVALID_PARAMS naming it', async () => {
    const a = client();
    for (const maxHoldMs of [4_999, 604_800_001]) {
      const error = await a.acquire(lockName('bad'), { ttlMs: 5_000, maxHoldMs }).then(
        () => undefined,
        (caught: unknown) => caught,
      );
      if (!isDlmError(error)) throw new Error(`expected a DlmError, got ${String(error)}`);
      expect([error.code, error.details.field]).toEqual(['INVALID_PARAMS', 'maxHoldMs']);
    }
  });
});
