import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build.js';
import { runEmbeddedCampaign } from './embedded-campaign.js';

beforeAll(() => ensureBuilt(), 120_000);

describe('the hold-cap segments on the embedded backend', () => {
  it('client pauses with a cap of one TTL: no S10 on the real server; the planted backend that ignores it is caught', async () => {
    const result = await runEmbeddedCampaign({
      nemeses: () => [],
      durationMs: 10_000,
      negativeControl: false,
      holdCapControl: true,
    });
    expect(result.errors).toEqual([]);
    const [real] = result.segments;
    expect(real?.check.stats.grants).toBeGreaterThan(10);
    expect(real?.check.counts.S10).toBe(0);
    expect(real?.unexpected).toBe(0);
    expect(result.holdCapControl).toMatchObject({ backend: 'embedded', detected: true });
    expect(result.holdCapControl!.violations).toBeGreaterThan(0);
    expect(result.passed).toBe(true);
  }, 240_000);
});
