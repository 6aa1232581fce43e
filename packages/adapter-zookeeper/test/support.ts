import { closedAfterAll, useService } from '@dlm/conformance';
import type { LockBackend } from '@dlm/core';
import { startZooKeeper, type ZooKeeperService } from '@dlm/test-services';
import { type Client, createClient } from 'node-zookeeper-client';
import { type ZooKeeperBackendOptions, zookeeperBackend } from '../src/index.js';

/**
 * A raw ZooKeeper client of the test's own, connected, to look at the nodes the adapter
 * writes (its session is separate from every backend's under test).
 */
async function connectRaw(connectString: string): Promise<Client> {
  const raw = createClient(connectString, { sessionTimeout: 4_000 });
  await new Promise<void>((resolve) => {
    raw.once('connected', () => resolve());
    raw.connect();
  });
  return raw;
}

/** A call of the raw client's callback API, as a promise of what the callback is handed. */
export function rawCall<T>(fn: (done: (error: unknown, value?: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) =>
    fn((error, value) => (error ? reject(error) : resolve(value as T))),
  );
}

/** The waiter nodes under a lock's name node `parent`, in queue order (none once it is gone). */
export async function waiterNodes(raw: Client, parent: string): Promise<string[]> {
  const children = await rawCall<string[]>((done) =>
    raw.getChildren(parent, (error, list) => done(error, list)),
  ).catch(() => [] as string[]);
  const sequence = (child: string) => Number(/-wait-(\d+)$/.exec(child)?.[1]);
  return children
    .filter((child) => /-wait-\d+$/.test(child))
    .sort((x, y) => sequence(x) - sequence(y));
}

/** ZooKeeper's last zxid: the mzxid of a write of the test's own, under `prefix`. */
export async function lastZxid(raw: Client, prefix: string): Promise<bigint> {
  const scratch = `${prefix}/scratch`;
  await rawCall((done) => raw.mkdirp(scratch, (error) => done(error)));
  const stat = await rawCall<{ mzxid: Buffer }>((done) =>
    raw.setData(scratch, Buffer.alloc(0), -1, (error, written) => done(error, written)),
  );
  return stat.mzxid.readBigInt64BE(0);
}

/** A ZooKeeper server, a raw client of it, and the backends a scope opens under one prefix. */
export interface ZooKeeperScope {
  zk(): ZooKeeperService;
  raw(): Client;
  /** A backend under the scope's prefix with 2 s sessions, closed after the scope's tests. */
  open(options?: Partial<ZooKeeperBackendOptions>): LockBackend;
}

/**
 * Starts ZooKeeper and connects a raw client before the enclosing scope's tests (file or
 * `describe`); after them closes the backends `open` made, then the raw client, then ZooKeeper.
 * `prefix` is the backends' root (zookeeperBackend's default, `/dlm`, unless a file keeps its
 * nodes apart).
 */
export function useZooKeeper(prefix = '/dlm'): ZooKeeperScope {
  const zk = useService(() => startZooKeeper());
  const raw = useService(
    () => connectRaw(zk().connectString),
    async (client) => client.close(),
  );
  const closing = closedAfterAll<LockBackend>();
  return {
    zk,
    raw,
    open: (options = {}) =>
      closing(
        zookeeperBackend({
          connect: zk().connectString,
          prefix,
          sessionTimeoutMs: 2_000,
          ...options,
        }),
      ),
  };
}
