import { closedAfterAll, useService } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { type EtcdService, startEtcd } from '@dlm/test-services';
import { Etcd3 } from 'etcd3';
import { type EtcdBackendOptions, etcdBackend } from '../src/index.js';

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

/** etcd, a raw client of it, and the backends a scope opens under one prefix. */
export interface EtcdScope {
  etcd(): EtcdService;
  /** A client of the test's own, to look at (and meddle with) the keys the adapter writes. */
  raw(): Etcd3;
  /** A backend under the scope's prefix (1 s leases at the least), closed after the scope's tests. */
  open(
    options?: Pick<EtcdBackendOptions, 'client' | 'waiterLeaseTtlMs' | 'wallClock'>,
  ): LockBackend;
}

/**
 * Starts etcd and a raw client of it before the enclosing scope's tests (file or `describe`);
 * after them closes the backends `open` made, then the raw client, then etcd.
 */
export function useEtcd(prefix: string): EtcdScope {
  const etcd = useService(startFastEtcd);
  const raw = useService(
    async () => new Etcd3({ hosts: etcd().endpoints }),
    async (client) => client.close(),
  );
  const closing = closedAfterAll<LockBackend>();
  return {
    etcd,
    raw,
    open: (options = {}) =>
      closing(etcdBackend({ endpoints: etcd().endpoints, minTtlMs: 1_000, prefix, ...options })),
  };
}

/** The waiter keys of `name`'s queue under `prefix`, oldest first. */
export async function waiterKeys(raw: Etcd3, prefix: string, name: string): Promise<string[]> {
  const keys = await raw
    .getAll()
    .prefix(`${prefix}queue/${name}\0`)
    .sort('Create', 'Ascend')
    .keys();
  return keys.map((key) => key.toString());
}
