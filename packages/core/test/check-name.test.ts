import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/errors.js';
import { serviceScope } from './service-scope.js';

const invalidName = (error: unknown) =>
  isDlmError(error, 'INVALID_PARAMS') && error.details.field === 'name';

describe('LockService.checkName', () => {
  const openService = serviceScope();

  it("checks a name against the service's own limits, once for the request that follows", async () => {
    const service = await openService({ limits: { maxNameBytes: 8 } });
    expect(service.checkName('eight-ch')).toBe('eight-ch');
    expect(() => service.checkName('nine-char')).toThrowError('name must be 1-8 UTF-8 bytes');
    expect(() => service.checkName('a\u0000b')).toThrow();
    expect(() => service.checkName(42)).toThrow();
    const lease = await service.acquire({
      name: service.checkName('jobs'),
      owner: 'o',
      ttlMs: 1_000,
    });
    expect(lease.name).toBe('jobs');
    // A name checked before does not let another one through.
    await expect(
      service.acquire({ name: 'nine-char', owner: 'o', ttlMs: 1_000 }),
    ).rejects.toSatisfy(invalidName);
    await expect(service.get('nine-char')).rejects.toSatisfy(invalidName);
  });
});
