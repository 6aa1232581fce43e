import type { LockBackend } from '@dlm/core';
import type { ConformanceContext } from './context.js';

/** What a backend's package hands the suite: how to open its backend, and the optional hooks. */
export interface ConformanceTarget {
  /** A new backend instance connected to the service under test; called once per test. */
  backend: () => LockBackend | Promise<LockBackend>;
  /** Run after each test with the instance it used (default: `backend.close()`). */
  cleanup?: (backend: LockBackend) => Promise<void>;
  /**
   * For backends with `durableAcrossRestart`: crash the service (kill -9 where possible) and
   * start it again with its data; `backend()` afterwards talks to the new one.
   */
  restart?: () => Promise<void>;
  /**
   * A second backend instance on the same store: another dlm server of the deployment. The
   * two-server groups (mutual exclusion across instances, a second server seeing the first's
   * grants and lease keys, the cross-server fair queue) use it. Default: `backend()`.
   */
  openSecond?: () => LockBackend | Promise<LockBackend>;
  /**
   * For backends with `capabilities.fairQueue`: a look at the store's queue, so the fair-queue
   * group can wait until a waiter has taken its place, and check that nothing is left behind.
   * Without it, the group gives each waiter a fixed pause instead and skips the "nothing left"
   * checks.
   */
  fairQueue?: FairQueueProbe;
  /**
   * For backends that run on a replicated cluster: starts a fresh cluster and a backend on it,
   * so the cluster-failover group can kill its leader and a majority.
   */
  cluster?: () => Promise<ClusterTarget>;
  /**
   * The backend package's own tests, registered inside the suite's `describe` so they run with
   * it and share its per-test backend and service (see `ConformanceContext`).
   */
  extraTests?: (suite: ConformanceContext) => void;
}

/** The fair-queue group's view of the store's waiter queue. */
export interface FairQueueProbe {
  /** The waiter entries of `name`'s queue in the store, oldest first (keys, node names, ...). */
  entries(name: string): Promise<string[]>;
}

/** A member of a replicated cluster that the failover group may kill and start again. */
export interface ClusterMember {
  readonly process: {
    readonly running: boolean;
    /** kill -9. */
    kill(): Promise<void>;
    /** Start again with its data; resolves once it serves (needs a quorum when one was lost). */
    start(): Promise<void>;
  };
}

/** A running cluster and one backend connected to all of its members. */
export interface ClusterTarget {
  /** A backend on every member, with `commandTimeoutMs` as its bound on one call. */
  backend: LockBackend;
  /** The backend's bound on one call: an outage must answer UNAVAILABLE within it (+500 ms). */
  commandTimeoutMs: number;
  members: readonly ClusterMember[];
  /** Resolves with the current leader once there is one. */
  waitForLeader(): Promise<ClusterMember>;
  /** Closes the backend and stops the cluster. */
  stop(): Promise<void>;
  /** The lease of the lock held across the leader's kill (default 20 s; more if elections are slow). */
  heldTtlMs?: number;
  /** How long locking may take to come back once a lost majority restarts (default 15 s). */
  resumeAfterMajorityMs?: number;
}
