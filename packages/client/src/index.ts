export { DlmError, type ErrorCode, isDlmError, type RetryOptions } from '@dlm/core';
export {
  type AcquireOptions,
  type ClientEvents,
  type ClientOptions,
  createClient,
  type DlmClient,
  type LockChange,
  type LockHolder,
  type LockInfo,
  type LockWatch,
  type RequestOptions,
  type SessionInfo,
  type WaitersInfo,
  type WithLockOptions,
} from './client.js';
export type { CampaignOptions, Leader, Leadership, ObserveOptions } from './leadership.js';
export type { ExpiringEvent, Lease, LeaseCallOptions, LostReason } from './lease.js';
export type { LeaseGroup } from './lease-group.js';
export type { LockSpec } from './lock-specs.js';
export type { ReleaseRequestResult, RequestReleaseOptions } from './release-requests.js';
export type {
  PermitOptions,
  ReadWriteLock,
  Semaphore,
  WithPermitOptions,
} from './semaphore.js';
export type { TlsOptions, WebSocketConstructor, WebSocketLike } from './websocket.js';
