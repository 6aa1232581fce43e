import { describe, expect, it } from 'vitest';
import { corkUntil } from '../src/cork.js';

function stream() {
  const calls: string[] = [];
  return { calls, cork: () => calls.push('cork'), uncork: () => calls.push('uncork') };
}

describe('corkUntil', () => {
  it('corks once until the flush, whatever is corked meanwhile, then corks again afresh', () => {
    const s = stream();
    const flushes: Array<() => void> = [];
    const later = (uncork: () => void) => flushes.push(uncork);
    corkUntil(s, later);
    corkUntil(s, later);
    expect(s.calls).toEqual(['cork']);
    expect(flushes).toHaveLength(1);
    flushes[0]!();
    expect(s.calls).toEqual(['cork', 'uncork']);
    corkUntil(s, later);
    expect(s.calls).toEqual(['cork', 'uncork', 'cork']);
  });

  it('holds each stream on its own', () => {
    const [a, b] = [stream(), stream()];
    const flushes: Array<() => void> = [];
    corkUntil(a, (uncork) => flushes.push(uncork));
    corkUntil(b, (uncork) => flushes.push(uncork));
    flushes[1]!();
    expect(a.calls).toEqual(['cork']);
    expect(b.calls).toEqual(['cork', 'uncork']);
  });
});
