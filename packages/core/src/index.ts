export type {
  AcquireRequest,
  AcquireResult,
  BackendCapabilities,
  Grant,
  HolderProof,
  HolderState,
  LockBackend,
  LockConflict,
  LockEvent,
  LockState,
  Unsubscribe,
} from './backend.js';
export {
  type Clock,
  createManualClock,
  type ManualClock,
  systemClock,
  type Timer,
} from './clock.js';
export { type Corkable, corkUntil } from './cork.js';
export { createDeadlineQueue, type DeadlineQueue } from './deadline-queue.js';
export {
  DlmError,
  ERROR_CODES,
  type ErrorCode,
  type ErrorDetails,
  isDlmError,
  isErrorCode,
  toUnavailable,
} from './errors.js';
export {
  createFenceGuard,
  type FenceGuard,
  type FenceGuardOptions,
  formatToken,
  MAX_TOKEN,
  parseToken,
} from './fencing.js';
export {
  aheadOf,
  decideGrant,
  GRANT_RULE_CASES,
  type GrantDecision,
  type GrantRuleCase,
  holdersOf,
  type ListedHolder,
  NOTHING_AHEAD,
  type RuleAhead,
  type RuleHolders,
  type RuleRequest,
  ruleAnswer,
} from './grant-rule.js';
export { createLeaseKey, hashLeaseKey } from './lease-key.js';
export { notHolderError } from './lock-errors.js';
export {
  deliverEvent,
  type HeardHolder,
  holderChangeEvents,
  type ListenerEntry,
  type LockListener,
  LockListeners,
  type LockListenersHooks,
} from './lock-listeners.js';
export {
  type AcquireOptions,
  createLockService,
  type ExtendOptions,
  type Lease,
  type LockChange,
  type LockService,
  type LockServiceOptions,
  type LostEvent,
  type ReleaseRequest,
} from './lock-service.js';
export { getOrCreate } from './maps.js';
export { type AcquireAllOptions, type LockSpec, validateLocks } from './multi-acquire.js';
export type { AroundBackendCall, BackendOperation, LockObserver } from './observer.js';
export {
  type BackendQueue,
  type QueueChange,
  type QueueDriver,
  type QueueRenewal,
  type QueueSleep,
  type QueueStep,
  type QueueWaiter,
  type QueueWaits,
  queueWaits,
  queueWatch,
} from './queue-driver.js';
export type { WaitersScope } from './queue-positions.js';
export type {
  ReleaseRequestedEvent,
  ReleaseRequestOptions,
  ReleaseRequestResult,
} from './release-requests.js';
// Every export of retry.ts, time.ts and validation.ts is public API.
export * from './retry.js';
export * from './time.js';
export * from './validation.js';
