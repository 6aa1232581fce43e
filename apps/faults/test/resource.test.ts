import { describe, expect, it } from 'vitest';
import { expectedReason } from '../src/expectations.js';
import { createFencedCounter } from '../src/resource.js';

describe('fenced counter', () => {
  it("a newer holder's read shuts out the older holder's late write", () => {
    const counter = createFencedCounter({ fencing: true });
    expect(counter.read('k', 1n)).toEqual({ accepted: true, value: 0 });
    expect(counter.read('k', 2n)).toEqual({ accepted: true, value: 0 });
    expect(counter.write('k', 1n, 1)).toEqual({ accepted: false, previous: 0 });
    expect(counter.write('k', 2n, 1)).toEqual({ accepted: true, previous: 0 });
    // The same token may write again; an older one may not even read.
    expect(counter.write('k', 2n, 2).accepted).toBe(true);
    expect(counter.read('k', 1n).accepted).toBe(false);
    expect(counter.snapshot()).toEqual({ k: { value: 2, highest: '2' } });
  });

  it('without fencing (the negative control) the late write lands', () => {
    const counter = createFencedCounter({ fencing: false });
    counter.read('k', 2n);
    counter.write('k', 2n, 1);
    expect(counter.write('k', 1n, 1)).toEqual({ accepted: true, previous: 1 });
  });
});

describe('expected violations come from declared capabilities', () => {
  const strict = {
    fencing: 'strict' as const,
    minTtlMs: 1,
    ttlGranularityMs: 1,
    durableAcrossRestart: true,
    fairQueue: false,
    expiryEvents: true,
  };
  const context = { capabilities: strict, kind: 'redis', nemesis: 'backend-kill', fencing: true };

  it('a strict, durable backend is expected to have none', () => {
    for (const property of ['S1', 'S2', 'S3', 'S4', 'S5', 'S6', 'L1', 'L4'] as const) {
      expect(expectedReason(property, context)).toBeUndefined();
    }
  });

  it('best-effort fencing, a non-durable restart, the negative control', () => {
    const bestEffort = { ...context, capabilities: { ...strict, fencing: 'best-effort' as const } };
    expect(expectedReason('S3', bestEffort)).toMatch(/best-effort/);
    expect(expectedReason('L1', bestEffort)).toBeUndefined();
    const volatile = { ...context, capabilities: { ...strict, durableAcrossRestart: false } };
    expect(expectedReason('S2', volatile)).toMatch(/forgets/);
    expect(expectedReason('S2', { ...volatile, nemesis: 'backend-pause' })).toBeUndefined();
    expect(expectedReason('S3', { ...context, fencing: false })).toMatch(/negative control/);
    expect(expectedReason('S2', { ...context, fencing: false })).toBeUndefined();
  });
});
