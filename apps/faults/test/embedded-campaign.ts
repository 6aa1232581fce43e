import { type CampaignOptions, type CampaignResult, runCampaign } from '../src/campaign.js';

/** What an embedded campaign test chooses; the rest is {@link runEmbeddedCampaign}'s. */
export type EmbeddedCampaignOptions = Pick<
  CampaignOptions,
  'nemeses' | 'durationMs' | 'negativeControl'
> &
  Partial<CampaignOptions>;

/**
 * A fenced campaign on the embedded backend (or the `backends` `options` name): 3 workers on 2
 * keys with 2 s leases, `options` saying which faults, for how long, and with or without the
 * negative control.
 */
export function runEmbeddedCampaign(options: EmbeddedCampaignOptions): Promise<CampaignResult> {
  return runCampaign({
    backends: ['embedded'],
    ttlMs: 2_000,
    workers: 3,
    keys: 2,
    // Generous: these campaigns share the machine with the rest of the test suite.
    l1BoundMs: 3_000,
    l4BoundMs: 2_000,
    fencing: true,
    ...options,
  });
}
