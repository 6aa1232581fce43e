import { afterEach, beforeEach, describe } from 'vitest';
import { type ConformanceContext, createContext } from './context.js';
import { badInputGroup } from './groups/bad-input.js';
import { checkGroup } from './groups/check.js';
import { clusterGroup } from './groups/cluster.js';
import { durabilityGroup } from './groups/durability.js';
import { expiryGroup } from './groups/expiry.js';
import { fairQueueGroup } from './groups/fair-queue.js';
import { grantsGroup } from './groups/grants.js';
import { holdCapGroup } from './groups/hold-cap.js';
import { leaseKeysGroup } from './groups/lease-keys.js';
import { lockDelayGroup } from './groups/lock-delay.js';
import { multiLockGroup } from './groups/multi-lock.js';
import { queuePositionsGroup } from './groups/queue-positions.js';
import { releaseAndExtendGroup } from './groups/release-extend.js';
import { releaseRequestsGroup } from './groups/release-requests.js';
import { sharedLoadGroup } from './groups/shared-load.js';
import { sharedMultiLockGroup } from './groups/shared-multi-lock.js';
import { sharedPrimitivesGroup } from './groups/shared-primitives.js';
import { sharedQueueGroup } from './groups/shared-queue.js';
import { sharedRulesGroup } from './groups/shared-rules.js';
import { waitingGroup } from './groups/waiting.js';
import { watchAndRevokeGroup } from './groups/watch-revoke.js';
import type { ConformanceTarget } from './target.js';

export type { ConformanceContext } from './context.js';
export { granted } from './grants.js';
export { type HolderCheck, holderCheck } from './holder-check.js';
export {
  expectDelayedTryLocks,
  expectRefusedAtOnce,
  expirySlack,
  failure,
  lockName,
  shortTtl,
  waitThrough,
} from './support.js';
export type {
  ClusterMember,
  ClusterTarget,
  ConformanceTarget,
  ConformanceTransport,
  FairQueueProbe,
} from './target.js';
export { clusterTarget, type OneInstance, oneInstance } from './target.js';
export {
  closedAfterAll,
  killAndStart,
  type Restartable,
  type Stoppable,
  useService,
} from './use-service.js';
export { pendingAfter, sleep, type UntilOptions, until } from './wait.js';

/**
 * The groups every backend runs, in order. Each registers one `describe` over the shared
 * per-test context; a group gates its own tests by the backend's declared capabilities.
 */
const groups: ReadonlyArray<(ctx: ConformanceContext) => void> = [
  grantsGroup,
  releaseAndExtendGroup,
  leaseKeysGroup,
  expiryGroup,
  waitingGroup,
  fairQueueGroup,
  watchAndRevokeGroup,
  multiLockGroup,
  sharedPrimitivesGroup,
  sharedRulesGroup,
  sharedQueueGroup,
  sharedLoadGroup,
  sharedMultiLockGroup,
  badInputGroup,
  durabilityGroup,
  releaseRequestsGroup,
  checkGroup,
  queuePositionsGroup,
  lockDelayGroup,
  holdCapGroup,
];

/**
 * The groups a transport's run keeps (`target.transport`): what any caller of the lock methods
 * relies on. The others test the backend and core themselves (the fair queue, watches and
 * revocation, shared modes, durability), the same through any door.
 */
const coreGroups: ReadonlySet<(ctx: ConformanceContext) => void> = new Set([
  grantsGroup,
  releaseAndExtendGroup,
  leaseKeysGroup,
  expiryGroup,
  waitingGroup,
  multiLockGroup,
  badInputGroup,
  checkGroup,
]);

/**
 * Registers the dlm backend conformance suite with vitest. Every test runs through core's
 * `LockService` (or, in the fair-queue group, the backend's own queue) over a fresh backend
 * instance, so it checks the adapter's primitives and the waits, fairness and lock-lost
 * detection core builds on them. Groups are gated by the backend's declared capabilities,
 * never by its name; `target.extraTests` adds the backend package's own tests to the run, and
 * `target.cluster` adds the cluster-failover group. With `target.transport` the core groups run
 * through that door of a dlm server instead (`POST /v1/rpc`).
 *
 * @example
 * runConformance('redis', { backend: () => redisBackend({ url }) });
 */
export function runConformance(name: string, target: ConformanceTarget): void {
  const { transport } = target;
  describe(`conformance: ${name}${transport ? ` over ${transport.name}` : ''}`, () => {
    const { ctx, open, close } = createContext(name, target);
    beforeEach(open);
    afterEach(close);
    for (const group of groups) if (!transport || coreGroups.has(group)) group(ctx);
    target.extraTests?.(ctx);
  });
  if (target.cluster && !transport) clusterGroup(name, target.cluster);
}
