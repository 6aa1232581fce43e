import { describe, expect, it } from 'vitest';
import {
  aheadOf,
  decideGrant,
  GRANT_RULE_CASES,
  type GrantRuleCase,
  holdersOf,
  ruleAnswer,
} from '../src/grant-rule.js';

describe('the grant rule', () => {
  it.each(GRANT_RULE_CASES.map((one) => [one.name, one] as const))('%s', (_name, testCase) => {
    expect(ruleAnswer(testCase)).toEqual(testCase.expect);
  });

  it('the case table reaches every branch of the rule', () => {
    const seen = new Set(
      GRANT_RULE_CASES.map((one) => {
        const decision = decideGrant(
          one.request,
          holdersOf(one.holders, one.lockDelayRemainingMs),
          aheadOf(one.request, one.ahead),
        );
        if (decision.kind === 'wait') {
          const on =
            decision.on === 'entry'
              ? decision.entry
              : decision.on === 'holder'
                ? decision.end
                : 'delay';
          return `${one.request.mode} wait ${on}`;
        }
        if (decision.kind === 'conflict') return `conflict ${decision.conflict.field}`;
        return `${one.request.mode} ${decision.kind}`;
      }),
    );
    expect([...seen].sort()).toEqual(
      [
        'conflict limit',
        'conflict mode',
        'exclusive grant',
        'exclusive refresh',
        'exclusive wait latest',
        'exclusive wait nearest',
        'exclusive wait delay',
        'shared wait delay',
        'shared grant',
        'shared refresh',
        'shared wait last-blocking',
        'shared wait latest',
        'shared wait nearest',
        'shared wait soonest',
      ].sort(),
    );
  });

  it('the table catches a translation that gets a case wrong (planted: entries ahead ignored)', () => {
    // What a translation's check does: its answer per case against the table. This one forgets
    // the queue, as a try-lock that barges would.
    const barging = (testCase: GrantRuleCase) =>
      ruleAnswer({ ...testCase, ahead: [] }) as GrantRuleCase['expect'];
    const wrong = GRANT_RULE_CASES.filter(
      (one) => JSON.stringify(barging(one)) !== JSON.stringify(one.expect),
    );
    expect(wrong.map((one) => one.name)).toContain(
      'exclusive, free, behind an entry: waits for the nearest entry',
    );
    expect(wrong.length).toBeGreaterThan(3);
  });
});
