import { beforeAll, describe, expect, it } from 'vitest';
import { runCampaign } from '../src/campaign.js';
import { ensureBuilt } from './build.js';

beforeAll(() => ensureBuilt(), 120_000);

describe('a campaign on the embedded backend (a process per worker, per resource, per server)', () => {
  it('client pauses: no violation with fencing; lost updates found with fencing off', async () => {
    const result = await runCampaign({
      backends: ['embedded'],
      nemeses: () => ['client-pause'],
      durationMs: 10_000,
      ttlMs: 2_000,
      workers: 3,
      keys: 2,
      // Generous: this file shares the machine with the rest of the test suite.
      l1BoundMs: 3_000,
      l4BoundMs: 2_000,
      fencing: true,
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
