import {
  type BackendCapabilities,
  createLockService,
  type LockBackend,
  type LockService,
} from '@dlm/core';
import type { ConformanceTarget } from './target.js';

/**
 * What every group's tests work with: a fresh backend and `LockService` per test, and more
 * servers of the same deployment on demand (all closed after the test).
 */
export interface ConformanceContext {
  /** The name given to `runConformance` (used in log lines). */
  readonly name: string;
  readonly target: ConformanceTarget;
  /** This test's backend (opened before each test). */
  readonly backend: LockBackend;
  /** This test's service, over `backend`. */
  readonly service: LockService;
  readonly caps: BackendCapabilities;
  /** A second backend on the same store (`target.openSecond`), closed after the test. */
  secondBackend(): Promise<LockBackend>;
  /** Another dlm server of the deployment: a service over `secondBackend()`. */
  otherService(): Promise<LockService>;
  /** Closes this test's service and backend, restarts the store, and opens new ones on it. */
  restartStore(): Promise<void>;
}

/** The context plus the hooks that open and close its per-test state. */
export interface ContextLifecycle {
  ctx: ConformanceContext;
  open(): Promise<void>;
  close(): Promise<void>;
}

export function createContext(name: string, target: ConformanceTarget): ContextLifecycle {
  let backend: LockBackend | undefined;
  let service: LockService | undefined;
  const extraBackends: LockBackend[] = [];
  const extraServices: LockService[] = [];
  const cleanup = target.cleanup ?? ((b: LockBackend) => b.close());
  const openSecond = target.openSecond ?? target.backend;
  const current = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the conformance context is used outside a test');
    return value;
  };

  /** A service over `over`: in process, or through the target's transport. */
  const serviceOver = (over: LockBackend): Promise<LockService> | LockService =>
    target.transport ? target.transport.open(over) : createLockService({ backend: over });

  const open = async () => {
    backend = await target.backend();
    service = await serviceOver(backend);
  };

  const secondBackend = async () => {
    const second = await openSecond();
    extraBackends.push(second);
    return second;
  };

  const ctx: ConformanceContext = {
    name,
    target,
    get backend() {
      return current(backend);
    },
    get service() {
      return current(service);
    },
    get caps() {
      return current(backend).capabilities;
    },
    secondBackend,
    async otherService() {
      const other = await serviceOver(await openSecond());
      extraServices.push(other);
      return other;
    },
    async restartStore() {
      if (!target.restart) throw new Error('the target has no restart hook');
      await current(service).close();
      await cleanup(current(backend)).catch(() => {});
      await target.restart();
      await open();
    },
  };

  const close = async () => {
    for (const extra of extraServices.splice(0)) {
      await extra.close();
      await cleanup(extra.backend);
    }
    for (const extra of extraBackends.splice(0)) await cleanup(extra);
    await service?.close();
    if (backend) await cleanup(backend);
    backend = undefined;
    service = undefined;
  };

  return { ctx, open, close };
}
