import type { LockService } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { failure, lockName } from '../support.js';

/**
 * Bad input: every malformed request is INVALID_PARAMS naming its field (the mode and limit
 * cases too, on every backend: they are checked before the backend's capabilities).
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
      // Modes and limits are checked before the backend's capabilities, so on every backend.
      ['an unknown mode', { mode: 'read' }, 'mode'],
      ['a mode that is not a string', { mode: 1 }, 'mode'],
      ['a shared limit of 0', { mode: 'shared', limit: 0 }, 'limit'],
      ['a shared limit above maxHolders', { mode: 'shared', limit: 10_001 }, 'limit'],
      ['a shared limit that is not an integer', { mode: 'shared', limit: 2.5 }, 'limit'],
      ['a shared limit that is not a number', { mode: 'shared', limit: '3' }, 'limit'],
      ['a limit with mode exclusive', { mode: 'exclusive', limit: 3 }, 'limit'],
      ['a limit without a mode (exclusive)', { limit: 3 }, 'limit'],
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

    it('acquireAll with a bad mode or limit in an entry is INVALID_PARAMS naming it, and takes nothing', async () => {
      const names = [lockName('bad-set-a'), lockName('bad-set-b')];
      const entries: Array<[Record<string, unknown>, string]> = [
        [{ mode: 'read' }, 'mode'],
        [{ mode: 'shared', limit: 0 }, 'limit'],
        [{ limit: 2 }, 'limit'],
      ];
      for (const [entry, field] of entries) {
        const error = await failure(
          ctx.service.acquireAll({
            locks: [{ name: names[0]! }, { name: names[1]!, ...entry }],
            owner: 'set',
            ttlMs: 5_000,
          } as Parameters<LockService['acquireAll']>[0]),
        );
        expect(error.code).toBe('INVALID_PARAMS');
        expect(error.details.field).toBe(field);
      }
      expect(await ctx.service.get(names[0]!)).toBeNull();
    });

    it('without capabilities.sharedModes, a shared acquire is INVALID_PARAMS naming mode', async (test) => {
      // The gate, inverted: a backend with shared modes grants this (the shared-mode groups).
      if (ctx.caps.sharedModes) test.skip('the backend declares capabilities.sharedModes');
      const error = await failure(
        ctx.service.acquire({
          name: lockName('no-shared'),
          owner: 'a',
          ttlMs: 5_000,
          mode: 'shared',
        }),
      );
      expect(error.code).toBe('INVALID_PARAMS');
      expect(error.details.field).toBe('mode');
    });

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
