import type { LockBackend, LockService } from '@dlm/core';
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
  /**
   * How the tests reach the lock service: by default core's `LockService` in this process. A
   * transport puts a door of a dlm server in between (`POST /v1/rpc`: each test's service is a
   * server over the test's backend, called over HTTP), and the suite then runs its core groups
   * through it: grants, release and extend, lease keys, expiry, waiting, multi-lock and bad
   * input.
   */
  transport?: ConformanceTransport;
}

/** A way to reach a dlm server's lock service other than in process. */
export interface ConformanceTransport {
  /** Shown in the suite's name: `conformance: embedded over POST /v1/rpc`. */
  name: string;
  /**
   * A service over `backend`, reached through this transport (a server it starts, and a client
   * of it); its `close()` ends pending waits with CANCELLED and stops the server, not the backend.
   * Its `waiters(name)` and `limits` must be the server's.
   */
  open(backend: LockBackend): Promise<LockService>;
  /**
   * Whether `lock.lost` (an acquire's `onLost`) and watches reach the caller: false for a door
   * without a session, whose tests of them are skipped.
   */
  notifications: boolean;
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

/**
 * A started cluster and a backend on all of its members, as the cluster-failover group takes
 * them: `stop` closes the backend, then stops the cluster.
 */
export function clusterTarget(
  cluster: {
    members: readonly ClusterMember[];
    waitForLeader(): Promise<ClusterMember>;
    stop(): Promise<unknown>;
  },
  backend: LockBackend,
  options: Pick<ClusterTarget, 'commandTimeoutMs' | 'heldTtlMs' | 'resumeAfterMajorityMs'>,
): ClusterTarget {
  return {
    backend,
    ...options,
    members: cluster.members,
    waitForLeader: () => cluster.waitForLeader(),
    stop: async () => {
      await backend.close();
      await cluster.stop();
    },
  };
}

/** What {@link oneInstance} gives a target, and `close` for the file's `afterAll`. */
export interface OneInstance extends Required<Pick<ConformanceTarget, 'backend' | 'cleanup'>> {
  /** Closes the instance; the next `backend()` opens a new one (for `restart` on a data dir). */
  reopen(): Promise<void>;
  /** Closes the instance, if one is open. */
  close(): Promise<void>;
}

/**
 * For a backend that is the service itself (an in-process store, as the embedded backend): "another
 * instance connected to the same service" is the same object, so every `backend()` returns one
 * instance, opened on first use, and `cleanup` leaves it open between tests (each test uses its
 * own names).
 */
export function oneInstance(open: () => Promise<LockBackend>): OneInstance {
  let current: Promise<LockBackend> | undefined;
  const close = async () => {
    const running = current;
    current = undefined;
    await (await running)?.close();
  };
  return {
    backend: () => {
      current ??= open();
      return current;
    },
    cleanup: async () => {},
    reopen: close,
    close,
  };
}
