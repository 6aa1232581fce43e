import { createClient } from '@dlm/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build.js';
import { runEmbeddedCampaign } from './embedded-campaign.js';

beforeAll(() => ensureBuilt(), 120_000);

/**
 * Whether this build's @dlm/client passes `mode` on (it has the shared-mode API). Without it the
 * segment must fail loudly (no shared grant) instead of passing on exclusive grants alone.
 */
async function clientHasSharedModes(): Promise<boolean> {
  const client = createClient({ url: 'ws://127.0.0.1:9/v1/ws', reconnect: false });
  const has = 'semaphore' in client;
  await client.close();
  return has;
}

describe('a shared-mode segment on the embedded backend (sharedModes: true)', () => {
  it('runs a semaphore and a read-write lock under client pauses with no violation', async () => {
    const result = await runEmbeddedCampaign({
      nemeses: () => [],
      sharedNemeses: () => ['client-pause'],
      sharedDurationMs: 4_000,
      durationMs: 4_000,
      negativeControl: false,
    });
    expect(result.sharedSkipped).toEqual([]);
    if (!(await clientHasSharedModes())) {
      expect(result.errors).toHaveLength(1);
      expect(result.errors[0]).toMatch(/no shared grant.*does the client pass mode/);
      expect(result.passed).toBe(false);
      return;
    }
    expect(result.errors).toEqual([]);
    expect(result.segments.map((s) => s.workload)).toEqual(['semaphore', 'read-write']);
    for (const segment of result.segments) {
      expect(segment.check.violations).toEqual([]);
      expect(segment.check.stats.grants).toBeGreaterThan(10);
    }
    // The read-write lock's writers did the fenced read-modify-write.
    expect(result.segments[1]!.check.stats.writes).toBeGreaterThan(0);
    expect(result.passed).toBe(true);
  }, 180_000);
});
