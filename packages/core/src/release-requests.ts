import type { LockEvent } from './backend.js';
import { DlmError } from './errors.js';
import { holdersOf } from './holder-view.js';
import { leasesOf } from './lease-tracking.js';
import type { NameState, ServiceContext } from './name-state.js';
import { validateReason } from './validation.js';

/**
 * Release requests: anyone allowed to lock a name may ask its holders to let go. Nothing is
 * released; each holder's lease hears `ReleaseRequestedEvent` (`AcquireOptions.
 * onReleaseRequested`), on whichever service sharing the backend follows it. The request travels
 * on the backend's own event channel (`LockBackend.requestRelease`, heard through `watch`), the
 * path grants and ends already take between servers.
 */

/** What a holder hears: its lease (`token`) of `name` is asked for, perhaps with a reason. */
export interface ReleaseRequestedEvent {
  name: string;
  token: bigint;
  reason?: string;
}

export interface ReleaseRequestOptions {
  name: string;
  /** Why, for the holder: 1-256 UTF-8 bytes, no control characters. */
  reason?: string | undefined;
}

/**
 * `notified`: the holders the backend listed when the request was made (0 when the name was
 * free: then nothing is sent). Each of them is asked; one whose holder is gone (its session
 * closed, its process exited) hears nothing.
 */
export interface ReleaseRequestResult {
  name: string;
  notified: number;
}

/** Asks the holders of `options.name` to let go (see the top of this file). */
export async function requestRelease(
  ctx: ServiceContext,
  options: ReleaseRequestOptions,
): Promise<ReleaseRequestResult> {
  const name = ctx.checkName(options.name);
  const reason = validateReason(options.reason);
  if (ctx.closed) throw new DlmError('UNAVAILABLE', 'the lock service is shutting down');
  const { backend, calls } = ctx;
  const current = await calls.bounded('inspect', 'inspect', () => backend.inspect(name));
  const notified = current ? holdersOf(current).length : 0;
  if (notified > 0) await publish(ctx, name, reason);
  ctx.notify('releaseRequested', { name, notified, ...(reason === undefined ? {} : { reason }) });
  return { name, notified };
}

/** Sends the request to every service sharing the backend, this one included. */
async function publish(ctx: ServiceContext, name: string, reason: string | undefined) {
  const { backend, calls } = ctx;
  if (backend.requestRelease) {
    await calls.bounded('requestRelease', 'requestRelease', () =>
      backend.requestRelease!(name, reason),
    );
    return;
  }
  // A backend only this process opens: its holders are all followed here.
  const state = ctx.names.get(name);
  const event: LockEvent = { name, type: 'releaseRequested' };
  if (reason !== undefined) event.reason = reason;
  if (state) ctx.onEvent(state, event);
}

/** A release request heard from the backend: every lease of the name followed here hears it. */
export function leasesHearRequest(ctx: ServiceContext, state: NameState, event: LockEvent): void {
  for (const lease of leasesOf(state)) {
    const heard: ReleaseRequestedEvent = { name: state.name, token: lease.token };
    if (event.reason !== undefined) heard.reason = event.reason;
    ctx.notify('releaseRequestHeard', heard);
    if (!lease.onReleaseRequested) continue;
    try {
      lease.onReleaseRequested(heard);
    } catch {
      // A listener's failure must not break the service.
    }
  }
}
