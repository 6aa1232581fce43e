import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build.js';
import { runEmbeddedCampaign } from './embedded-campaign.js';

beforeAll(() => ensureBuilt(), 120_000);

describe('the lock-delay segments on the embedded backend', () => {
  it('client pauses with a lock-delay: no S9 on the real server; the planted backend that ignores it is caught', async () => {
    const result = await runEmbeddedCampaign({
      nemeses: () => [],
      durationMs: 10_000,
      negativeControl: false,
      lockDelayControl: true,
    });
    expect(result.errors).toEqual([]);
    const [real] = result.segments;
    expect(real?.check.stats.faults).toBeGreaterThan(0);
    expect(real?.check.stats.grants).toBeGreaterThan(10);
    expect(real?.check.counts.S9).toBe(0);
    expect(real?.unexpected).toBe(0);
    expect(result.lockDelayControl).toMatchObject({ backend: 'embedded', detected: true });
    expect(result.lockDelayControl!.violations).toBeGreaterThan(0);
    expect(result.passed).toBe(true);
  }, 240_000);
});
