import { validateName, validateReason } from '@dlm/core';
import type { RequestOptions } from './client.js';
import type { ClientCore } from './client-core.js';

/** Options of `client.requestRelease`. */
export interface RequestReleaseOptions extends RequestOptions {
  /** Why, for the holders: 1-256 UTF-8 bytes, no control characters. */
  reason?: string;
}

/** What `client.requestRelease` reports: how many holders were asked. */
export interface ReleaseRequestResult {
  name: string;
  /** The holders the server's backend listed when asked (0: the lock was free, nobody asked). */
  notified: number;
}

/**
 * Asks every holder of `name` to let go (`lock.requestRelease`): checked here by the server's
 * own validation, then sent (retried: asking twice only asks again).
 */
export async function requestRelease(
  core: ClientCore,
  name: string,
  options: RequestReleaseOptions = {},
): Promise<ReleaseRequestResult> {
  validateName(name, core.limits());
  const reason = validateReason(options.reason);
  const result = await core.request(
    'lock.requestRelease',
    { name, ...(reason === undefined ? {} : { reason }) },
    core.policyFor(options.retry, options.signal),
  );
  return { name: result.name, notified: result.notified };
}
