import type { Clock, LockBackend } from '@dlm/core';
import { type BackendConfig, openBackendOf } from './backends/index.js';
import type { Logger } from './logger.js';

export interface CreateBackendOptions {
  /**
   * The lock service's clock, for the adapters that keep time themselves (embedded leases, the
   * Redis adapters' own deadlines). Default: the system clock.
   */
  clock?: Clock;
}

/**
 * Opens the configured backend. Adapters are imported on demand, so a server on the embedded
 * backend never loads ioredis, etcd3, the ZooKeeper client or pg.
 */
export function createBackend(
  config: BackendConfig,
  logger: Logger,
  options: CreateBackendOptions = {},
): Promise<LockBackend> {
  return openBackendOf(config, { logger, ...(options.clock ? { clock: options.clock } : {}) });
}
