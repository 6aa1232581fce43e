import { etcdAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import type { CampaignResult } from '../src/campaign.js';
import { ensureBuilt } from './build.js';
import { runEmbeddedCampaign } from './embedded-campaign.js';

beforeAll(() => ensureBuilt(), 120_000);

/**
 * The segments of the rules that run on time (issue 31): client pauses against a lock-delay and
 * against a cap on holding. Each must find nothing on the real server and catch its planted
 * backend (one that ignores the rule).
 */
const RULES = [
  {
    rule: 'lock-delay',
    property: 'S9',
    control: { lockDelayControl: true },
    planted: (result: CampaignResult) => result.lockDelayControl,
  },
  {
    rule: 'hold cap of one TTL',
    property: 'S10',
    control: { holdCapControl: true },
    planted: (result: CampaignResult) => result.holdCapControl,
  },
] as const;

type Rule = (typeof RULES)[number];

/** The test of `rule` on `backend` (see the top of this file). */
const ruleTest = (backend: 'embedded' | 'etcd', { rule, property, control, planted }: Rule) =>
  it(`client pauses with a ${rule}: no ${property} on the real server; the planted backend that ignores it is caught`, async () => {
    const result = await runEmbeddedCampaign({
      backends: [backend],
      nemeses: () => [],
      durationMs: 10_000,
      negativeControl: false,
      ...control,
    });
    expect(result.errors).toEqual([]);
    const [real] = result.segments;
    expect(real?.check.stats.faults).toBeGreaterThan(0);
    expect(real?.check.stats.grants).toBeGreaterThan(10);
    expect(real?.check.counts[property]).toBe(0);
    expect(real?.unexpected).toBe(0);
    expect(planted(result)).toMatchObject({ backend, detected: true });
    expect(planted(result)!.violations).toBeGreaterThan(0);
    expect(result.passed).toBe(true);
  }, 240_000);

describe.concurrent('the timed rules on the embedded backend', () => {
  for (const rule of RULES) ruleTest('embedded', rule);
});

describe.skipIf(!etcdAvailable())('the hold cap on etcd', () => {
  // etcd keeps caps by the dlm servers' wall clocks, and grants waiters through its own queue
  // (whose drivers the planted backend must strip too); core's timer ends its whole-second
  // leases at the cap.
  ruleTest('etcd', RULES[1]);
});
