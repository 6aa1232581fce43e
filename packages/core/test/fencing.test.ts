import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/errors.js';
import { createFenceGuard } from '../src/fencing.js';

describe('createFenceGuard', () => {
  it('accepts equal and higher tokens per key, refuses lower ones, and never lowers its mark (S1)', () => {
    const guard = createFenceGuard();
    expect(guard.accept('a', 5n)).toBe(true);
    expect(guard.accept('a', 5n)).toBe(true); // the same holder writing again
    expect(guard.accept('a', 4n)).toBe(false);
    expect(guard.highest('a')).toBe(5n);
    expect(guard.accept('b', 1n)).toBe(true); // keys are independent
    expect(guard.accept('a', '7')).toBe(true); // the wire's decimal form
    expect(guard.accept('a', 6n)).toBe(false);
    expect(guard.highest('a')).toBe(7n);
  });

  it('a random interleaving never accepts a token below one accepted before', () => {
    const guard = createFenceGuard();
    let accepted = 0n;
    for (let i = 0; i < 2_000; i++) {
      const token = BigInt(1 + Math.floor(Math.random() * 100));
      const ok = guard.accept('k', token);
      expect(ok).toBe(token >= accepted);
      if (ok) accepted = token;
    }
  });

  it('assert throws NOT_HOLDER for a stale token and INVALID_PARAMS for a non-token', () => {
    const guard = createFenceGuard({ initial: [['k', 10n]] });
    expect(guard.highest('k')).toBe(10n);
    expect(guard.assert('k', '10')).toBe(10n);
    expect(() => guard.assert('k', 9n)).toThrow(/stale fencing token 9/);
    try {
      guard.assert('k', 9n);
    } catch (error) {
      expect(isDlmError(error, 'NOT_HOLDER')).toBe(true);
    }
    for (const bad of ['0', '-1', '01', 'x', 0n]) {
      let field: string | undefined;
      try {
        guard.accept('k', bad);
      } catch (error) {
        if (isDlmError(error, 'INVALID_PARAMS')) field = error.details.field;
      }
      expect(field).toBe('token');
    }
    expect(guard.highest('k')).toBe(10n);
  });
});
