import { type HistoryEvent, mergeHistories } from '@dlm/faults';
import { describe, expect, it } from 'vitest';
import { checkLbHistory, checkOptions } from './lb-history.js';

/**
 * The check the load-balancer scenarios end with can fail: the same checkers over hand-written
 * histories of one lock, one where the second holder is granted after the first released and one
 * where it is granted while the first still holds (what a server that lost its backend's state
 * would do).
 */
type Step = [
  t: number,
  proc: string,
  op: number,
  f: 'acquire' | 'release',
  type: 'invoke' | 'ok',
  token: string,
];

function history(steps: Step[]): HistoryEvent[] {
  const events = steps.flatMap(([t, proc, op, f, type, token]) => {
    const done =
      type === 'ok' && f === 'acquire'
        ? { token, ttlMs: 20_000, deadline: t + 20_000 }
        : type === 'ok'
          ? { token, released: true }
          : f === 'release'
            ? { token }
            : {};
    return [
      { kind: 'op', t, proc, op, f, type, name: 'lb/x', ...done },
      { kind: 'lock', t, proc, op, f, type, name: 'lb/x', ...done },
    ] as HistoryEvent[];
  });
  return mergeHistories(events);
}

const options = checkOptions(5_000, 10_000);
const check = (steps: Step[]) => checkLbHistory(history(steps), options);

// Both histories are c1 taking the lock and releasing it at 100-110 ms, and c2 asking at 50 ms:
// they differ only in when c2 is granted.
const c1Acquires: Step[] = [
  [0, 'c1', 1, 'acquire', 'invoke', ''],
  [10, 'c1', 1, 'acquire', 'ok', '1'],
];
const c1Releases: Step[] = [
  [100, 'c1', 2, 'release', 'invoke', '1'],
  [110, 'c1', 2, 'release', 'ok', '1'],
];
const c2GrantedAt = (t: number): Step[] => [
  [50, 'c2', 1, 'acquire', 'invoke', ''],
  [t, 'c2', 1, 'acquire', 'ok', '2'],
];

describe("the load-balancer scenarios' history check", () => {
  it('passes a history where each holder is granted after the last one released', () => {
    const verdict = check([...c1Acquires, ...c1Releases, ...c2GrantedAt(120)]);
    expect(verdict.messages).toEqual([]);
    expect(verdict.checker.stats.grants).toBe(2);
  });

  it('flags a second holder granted while the first still holds (S4, S6, not linearizable)', () => {
    const verdict = check([...c1Acquires, ...c2GrantedAt(60), ...c1Releases]);
    expect(verdict.checker.counts.S6).toBe(1);
    // The first holder's release after the second grant succeeded too.
    expect(verdict.checker.counts.S4).toBe(1);
    expect(verdict.linearizability.violations).toBe(1);
    expect(verdict.violations).toBe(3);
    expect(verdict.messages.join('\n')).toContain('c2 was granted token 2 while c1 still held 1');
  });
});
