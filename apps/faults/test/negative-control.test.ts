import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build.js';
import { runEmbeddedCampaign } from './embedded-campaign.js';

beforeAll(() => ensureBuilt(), 120_000);

describe('a campaign on the embedded backend (a process per worker, per resource, per server)', () => {
  it('client pauses: no violation with fencing; lost updates found with fencing off', async () => {
    const result = await runEmbeddedCampaign({
      nemeses: () => ['client-pause'],
      durationMs: 10_000,
      negativeControl: true,
    });
    expect(result.errors).toEqual([]);
    const [fenced, control] = result.segments;
    expect(fenced?.negativeControl).toBe(false);
    expect(fenced?.check.stats.faults).toBeGreaterThan(0);
    expect(fenced?.check.stats.writes).toBeGreaterThan(20);
    // The first pause (2 × TTL, just after a read) leaves a stale write that the fence refuses.
    expect(fenced?.check.stats.staleRefused).toBeGreaterThan(0);
    expect(fenced?.check.violations).toEqual([]);

    expect(control?.negativeControl).toBe(true);
    expect(control?.fencing).toBe(false);
    expect(control?.check.counts.S3).toBeGreaterThan(0);
    expect(result.negativeControl).toMatchObject({ run: true, detected: true });
    expect(result.passed).toBe(true);
  }, 180_000);
});
