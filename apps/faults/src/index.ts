export {
  type CampaignOptions,
  type CampaignResult,
  type LockSegmentReport,
  runCampaign,
  type SegmentReport,
} from './campaign.js';
export {
  type CheckOptions,
  type CheckResult,
  type CheckStats,
  checkHistory,
  PROPERTIES,
  type Property,
  type Violation,
} from './checker.js';
export { expectedReason } from './expectations.js';
export {
  completionOf,
  createHistoryWriter,
  type FaultEvent,
  type HistoryEvent,
  type HistoryWriter,
  type LostEvent,
  lockCompletionOf,
  mergeHistories,
  type OpEvent,
  type ProcessEvent,
  parseHistory,
  type ResourceEvent,
  readHistoryDir,
  type Unstamped,
} from './history.js';
export {
  checkLinearizability,
  checkName,
  type LinearizabilityOptions,
  type LinearizabilityResult,
  type LockOp,
  type LockOpEvent,
  lockOpsFromEvents,
  type NameVerdict,
} from './linearizability.js';
export { LOCK_SEGMENT_NEMESES, type LockSegmentResult, runLockSegment } from './lock-segment.js';
export { NEMESES, type Nemesis, nemesisNamed } from './nemeses.js';
export { renderMarkdown, toJson, writeReport } from './report.js';
export { createFencedCounter, type FencedCounter } from './resource.js';
export { createSkewClock, type SkewClock } from './skew-clock.js';
export { createTcpProxy, type ProxyMode, type TcpProxy } from './tcp-proxy.js';
export { monoNow } from './time.js';
export { BACKENDS, type BackendVariant, startTopology } from './topology.js';
