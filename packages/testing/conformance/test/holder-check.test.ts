import { describe, expect, it } from 'vitest';
import { holderCheck } from '../src/index.js';

describe('holderCheck (the S7 counter)', () => {
  it('accepts up to the limit of shared holders, then one exclusive holder alone', () => {
    const check = holderCheck(2);
    check.enter('shared', 2);
    check.enter('shared', 2);
    check.leave('shared');
    check.leave('shared');
    check.enter('exclusive');
    check.leave('exclusive');
    expect(check.violations).toEqual([]);
    expect(check.maxShared).toBe(2);
    expect(check.grants).toEqual({ shared: 2, exclusive: 1 });
  });

  it('reports shared holders past the limit, an exclusive holder beside others, and another limit', () => {
    const over = holderCheck(2);
    for (let i = 0; i < 3; i += 1) over.enter('shared', 2);
    expect(over.violations).toEqual(['3 shared holders at once (limit 2)']);

    const beside = holderCheck(2);
    beside.enter('shared', 2);
    beside.enter('exclusive');
    beside.enter('shared', 2);
    expect(beside.violations).toEqual([
      'an exclusive grant beside 0 exclusive and 1 shared holders',
      'a shared grant beside an exclusive holder',
    ]);

    const two = holderCheck(1);
    two.enter('exclusive');
    two.enter('exclusive');
    expect(two.violations).toHaveLength(1);

    const limit = holderCheck(3);
    limit.enter('shared', 4);
    expect(limit.violations).toEqual(['a shared grant with limit 4, not 3']);
  });

  it("checks the backend's view too: holders past the limit, two exclusive holders, another limit", () => {
    const check = holderCheck(1);
    const holder = (token: bigint) => ({ owner: 'o', token, ttlRemainingMs: 1 });
    const state = { name: 'n', owner: 'o', token: 2n, ttlRemainingMs: 1 };
    check.observe(null);
    check.observe({ ...state, mode: 'shared', limit: 1, holders: [holder(2n)] });
    expect(check.violations).toEqual([]);
    check.observe({ ...state, mode: 'shared', limit: 1, holders: [holder(1n), holder(2n)] });
    check.observe({ ...state, mode: 'exclusive', holders: [holder(1n), holder(2n)] });
    check.observe({ ...state, mode: 'shared', limit: 2, holders: [holder(2n)] });
    expect(check.violations).toEqual([
      'get: 2 shared holders (limit 1)',
      'get: 2 exclusive holders',
      'get: shared holders with limit 2, not 1',
    ]);
  });
});
