/**
 * What every benchmarked lock implementation looks like to the workloads: dlm through its
 * TypeScript client, and each peer library used directly. One `Locker` is one simulated client
 * with its own connection(s), as a separate process would have.
 */

export interface AcquireOptions {
  ttlMs: number;
  /** 0: one attempt. Otherwise keep trying (server-side wait or the peer's retry loop) this long. */
  waitMs: number;
  /**
   * Absent: `exclusive` (for a read-write lock, a write). `shared`: one of up to `limit`
   * holders (a semaphore's permit), or without `limit` a read.
   */
  mode?: 'exclusive' | 'shared';
  limit?: number;
}

/** The shared-mode workloads (6: a semaphore, 7: a read-write lock). */
export type SharedWorkload = 'semaphore' | 'read-write';

export interface Held {
  release(): Promise<void>;
}

export interface Locker {
  /** Resolves once the lock is held; rejects when it could not be had within `waitMs`. */
  acquire(name: string, options: AcquireOptions): Promise<Held>;
  close(): Promise<void>;
}

export interface Target {
  /** Stable id used in results files and `--only`, e.g. `dlm-redis`, `peer-redis-semaphore`. */
  readonly id: string;
  /** Shown in the table. */
  readonly label: string;
  readonly kind: 'dlm' | 'peer';
  /** The pids of the services behind it (redis-server, etcd, ZooKeeper), for CPU accounting. */
  backendPids?: () => number[];
  /**
   * A peer's shared-mode workloads (what its library offers); the others run none. A dlm target
   * leaves it out: whether its backend has `sharedModes` is found out by a probe once started.
   */
  sharedWorkloads?: readonly SharedWorkload[];
  /** Only these workloads (a peer that is a read-write lock and nothing else); default all. */
  onlyWorkloads?: readonly string[];
  /** Starts whatever this target needs besides the shared services (a dlm server process). */
  start(): Promise<RunningTarget>;
}

export interface RunningTarget {
  /** A new simulated client, connected. */
  connect(): Promise<Locker>;
  /** The process serving the locks, when it is ours (dlm's server), for RSS and profiles. */
  readonly serverPid?: number | undefined;
  stop(): Promise<void>;
}

/** How a polling peer waits between attempts, shared so every poller gets the same interval. */
export interface PollOptions {
  pollMs: number;
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));

/** Thrown by the peers' wait loops when `waitMs` ran out; counted as a timeout, not an error. */
export class WaitTimeout extends Error {
  constructor(name: string) {
    super(`timed out waiting for ${name}`);
  }
}

/** A peer that has nothing of its own to start or stop: only clients to connect. */
export function peerTarget(
  id: string,
  label: string,
  connect: () => Promise<Locker>,
  extra: Pick<Target, 'sharedWorkloads' | 'onlyWorkloads'> = {},
): Target {
  return {
    id,
    label,
    kind: 'peer',
    ...extra,
    async start() {
      return { connect, async stop() {} };
    },
  };
}
