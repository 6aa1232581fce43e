import { useService } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { type EtcdService, startEtcd } from '@dlm/test-services';
import { etcdBackend } from '../src/index.js';

/** etcd with fast elections, so a test that kills the leader does not wait out the defaults. */
export function startFastEtcd(): Promise<EtcdService> {
  return startEtcd({ heartbeatIntervalMs: 50, electionTimeoutMs: 500 });
}

/** Makes lock names under `area`, unique per call, so tests never see each other's locks. */
export function lockNames(area: string): (label: string) => string {
  let unique = 0;
  return (label) => `${area}/${label}/${process.pid}-${Date.now()}-${++unique}`;
}

/** etcd and a backend on it (keys under `prefix`, 1 s leases at the least). */
export interface EtcdFixture {
  readonly etcd: EtcdService;
  readonly backend: LockBackend;
}

/** Starts an {@link EtcdFixture} before the enclosing scope's tests and closes it after them. */
export function useEtcdBackend(prefix: string): EtcdFixture {
  const etcd = useService(startFastEtcd);
  // Opened after etcd has started; closed before it stops (after-hooks run in reverse order).
  const backend = useService(
    async () => etcdBackend({ endpoints: etcd().endpoints, minTtlMs: 1_000, prefix }),
    (opened) => opened.close(),
  );
  return {
    get etcd() {
      return etcd();
    },
    get backend() {
      return backend();
    },
  };
}
