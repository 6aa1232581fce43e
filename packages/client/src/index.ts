export { DlmError, type ErrorCode, isDlmError } from '@dlm/core';
export {
  type AcquireOptions,
  type ClientEvents,
  type ClientOptions,
  createClient,
  type DlmClient,
  type LockChange,
  type LockInfo,
  type LockWatch,
  type SessionInfo,
  type WithLockOptions,
} from './client.js';
export type { ReconnectOptions } from './connection.js';
export type { Lease, LostReason } from './lease.js';
export type { WebSocketConstructor, WebSocketLike } from './websocket.js';
