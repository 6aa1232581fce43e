import type { LockService } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName } from '../support.js';

/**
 * Bad input: every malformed request is INVALID_PARAMS naming its field.
 */
export function badInputGroup(ctx: ConformanceContext): void {
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
        const error = await failure(ctx.service.acquire(request));
        expect(error.code).toBe('INVALID_PARAMS');
        expect(error.details.field).toBe(field);
      });
    }

    it('release and extend with an out-of-range token are INVALID_PARAMS', async () => {
      const name = lockName('bad-token');
      for (const token of [0n, -1n, 2n ** 63n]) {
        expect((await failure(ctx.service.release({ name, token }))).details.field).toBe('token');
        expect(
          (await failure(ctx.service.extend({ name, token, ttlMs: 5_000 }))).details.field,
        ).toBe('token');
      }
    });
  });
}
