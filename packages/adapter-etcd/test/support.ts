import type { LockBackend } from '@dlm/core';
import { type EtcdService, startEtcd } from '@dlm/test-services';
import { afterAll, beforeAll } from 'vitest';
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
  let etcd: EtcdService | undefined;
  let backend: LockBackend | undefined;
  beforeAll(async () => {
    etcd = await startFastEtcd();
    backend = etcdBackend({ endpoints: etcd.endpoints, minTtlMs: 1_000, prefix });
  });
  afterAll(async () => {
    await backend?.close();
    await etcd?.stop();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('etcd and the backend start in beforeAll');
    return value;
  };
  return {
    get etcd() {
      return started(etcd);
    },
    get backend() {
      return started(backend);
    },
  };
}
