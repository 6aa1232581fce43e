import { createLockService, isDlmError, type LockBackend } from '@dlm/core';
import type { Locker, RunningTarget, Target } from './locker.js';
import { WaitTimeout } from './locker.js';

/**
 * dlm's library path: `@dlm/core`'s `createLockService` over an adapter in the benchmark's own
 * process, no server and no WebSocket, as a Node service that embeds dlm runs it.
 */

let lockers = 0;

/** One simulated client: one `LockService` over `backend`; its own owner on every acquire. */
function serviceLocker(backend: LockBackend, closeBackend: boolean): Locker {
  const service = createLockService({ backend });
  // Core treats a second acquire by the same owner as a re-acquire of the same lease, so each
  // acquire (each caller, when one locker serves many) gets its own owner, as @dlm/client does.
  const ownerPrefix = `bench-lib-${++lockers}-`;
  let acquires = 0;
  return {
    async acquire(name, { ttlMs, waitMs, mode, limit }) {
      const owner = `${ownerPrefix}${++acquires}`;
      const request = {
        name,
        owner,
        ttlMs,
        waitMs,
        ...(mode === undefined ? {} : { mode }),
        ...(limit === undefined ? {} : { limit }),
      };
      const lease = await service.acquire(request).catch((error) => {
        throw isDlmError(error, 'LOCK_HELD') ? new WaitTimeout(name) : error;
      });
      return {
        release: () => service.release({ name, token: lease.token, leaseKey: lease.leaseKey }),
      };
    },
    async close() {
      await service.close();
      if (closeBackend) await backend.close();
    },
  };
}

export interface LibTargetOptions {
  id: string;
  label: string;
  /** Opens the adapter (connected and ready). */
  openBackend: () => Promise<LockBackend>;
  /**
   * One backend for the whole run, a service per client over it: for a backend that lives in
   * this process (embedded), which a second process could not share anyway. Otherwise every
   * client opens its own backend (its own connections), as a process per client would.
   */
  sharedBackend?: boolean;
}

export function libTarget(options: LibTargetOptions): Target {
  return {
    id: options.id,
    label: options.label,
    kind: 'dlm',
    async start(): Promise<RunningTarget> {
      if (!options.sharedBackend) {
        return {
          connect: async () => serviceLocker(await options.openBackend(), true),
          async stop() {},
        };
      }
      const backend = await options.openBackend();
      return {
        connect: async () => serviceLocker(backend, false),
        stop: () => backend.close(),
      };
    },
  };
}
