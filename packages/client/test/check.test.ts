import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/index.js';
import { lockName, useProxiedServer } from './support.js';

const env = useProxiedServer();
const { client } = env;

describe('check', () => {
  it("is true for the holder's token (bigint or string) from any client, false for others and after the release", async () => {
    const [a, b] = [client(), client()];
    const name = lockName('check');
    const lease = await a.acquire(name, { ttlMs: 10_000 });
    expect(await b.check(name, lease.token)).toBe(true);
    expect(await b.check(name, lease.token.toString())).toBe(true);
    expect(await b.check(name, lease.token + 1n)).toBe(false);
    await lease.release();
    expect(await b.check(name, lease.token)).toBe(false);
  });

  it('a malformed token is INVALID_PARAMS naming token, before anything is sent', async () => {
    const a = client();
    for (const token of [0n, '007', '-1', 2n ** 63n]) {
      const error = await a.check(lockName('check-bad'), token).catch((caught: unknown) => caught);
      expect(isDlmError(error, 'INVALID_PARAMS'), String(token)).toBe(true);
      expect((error as { details: { field: string } }).details.field).toBe('token');
    }
    expect(a.session).toBeUndefined();
  });
});
