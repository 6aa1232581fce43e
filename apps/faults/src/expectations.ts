import type { BackendCapabilities } from '@dlm/core';
import type { Property } from './checker.js';

const SAFETY: Property[] = ['S1', 'S2', 'S3', 'S4', 'S5', 'S6', 'S7', 'S9', 'S10'];

/**
 * Why a violation of `property` is what the backend promises rather than a failure, or
 * undefined when it is a failure. The reasons come from the backends' declared capabilities,
 * never from their names:
 *
 * - `fencing: 'best-effort'` (Redlock): tokens are not promised to be unique or increasing, so
 *   nothing built on them (S1–S7) is promised either.
 * - `durableAcrossRestart: false` and a nemesis that restarts the backend (Redis without AOF,
 *   a Redlock node): the restarted backend forgot its locks and its token counters.
 * - A clock nemesis where the backend keeps time with the dlm server's clock (the embedded
 *   backend, which has `expiryEvents` on the server's own timers): leases end early by the
 *   server's clock, so a client's deadline (on its own clock) can outlast them (S6, and S7
 *   whose holders hold until their deadlines).
 * - The negative control (fencing off at the resource): S1 and S3 must show.
 */
export function expectedReason(
  property: Property,
  context: {
    capabilities: BackendCapabilities;
    kind: string;
    nemesis: string;
    fencing: boolean;
  },
): string | undefined {
  const { capabilities, nemesis } = context;
  if (!context.fencing && (property === 'S1' || property === 'S3')) {
    return 'negative control: the resource does not check tokens';
  }
  if (capabilities.fencing === 'best-effort' && SAFETY.includes(property)) {
    return 'best-effort fencing (declared by the backend)';
  }
  if (
    !capabilities.durableAcrossRestart &&
    (nemesis === 'backend-kill' || nemesis === 'majority-kill') &&
    SAFETY.includes(property)
  ) {
    return 'the backend forgets locks and tokens on restart (declared: not durable)';
  }
  if (
    context.kind === 'embedded' &&
    nemesis.startsWith('clock-') &&
    (property === 'S6' || property === 'S7' || property === 'S9' || property === 'S10')
  ) {
    return "the skewed clock is the backend's own clock (embedded)";
  }
  return undefined;
}

/** Nemeses that crash, stop or cut off the backend itself (a Sentinel master's kill too). */
const BACKEND_FAULT = (nemesis: string) =>
  nemesis.startsWith('backend-') || nemesis === 'majority-kill' || nemesis === 'master-kill';

/**
 * Why a non-linearizable lock history is what the backend promises, or undefined when it is a
 * failure. Under faults of the backend itself, best-effort fencing (Redlock) promises neither
 * increasing tokens nor a single holder, and a backend that is not durable forgets its locks
 * when restarted. Without backend faults every backend, Redlock included, must be
 * linearizable.
 */
export function expectedLinearizabilityReason(context: {
  capabilities: BackendCapabilities;
  nemesis: string;
}): string | undefined {
  const { capabilities, nemesis } = context;
  if (!BACKEND_FAULT(nemesis)) return undefined;
  if (capabilities.fencing === 'best-effort') {
    return 'best-effort fencing under backend faults (declared by the backend)';
  }
  if (
    !capabilities.durableAcrossRestart &&
    (nemesis === 'backend-kill' || nemesis === 'majority-kill')
  ) {
    return 'the backend forgets locks and tokens on restart (declared: not durable)';
  }
  return undefined;
}
