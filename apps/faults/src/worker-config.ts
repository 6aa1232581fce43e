/** What the harness tells a workload process (as JSON in `DLM_FAULTS_WORKER`). */
export interface WorkerConfig {
  /** This process's id in the history (`w1`, `w2`, and `w2.1` for w2's replacement). */
  proc: string;
  /** The dlm server, through this worker's own proxy. */
  url: string;
  /** The fenced resource (`http://127.0.0.1:PORT`). */
  resourceUrl: string;
  /** Lock names; each is also the resource key it guards. One is picked per iteration. */
  names: string[];
  ttlMs: number;
  waitMs: number;
  /** Where to append the history (JSONL). */
  historyPath: string;
  /** Where to write what it holds now, for the nemesis to pick a holder. */
  statusPath: string;
  /** Random delay between the read and the write, ms. */
  holdMs: [number, number];
  /** Random pause between iterations, ms. */
  thinkMs: [number, number];
  /** Chance of an extend between the read and the write. */
  extendProbability: number;
  /** The client's bound on one request. */
  requestTimeoutMs: number;
  /**
   * `meddler`: holds nothing; tries to release and extend others' leases with the tokens
   * `lock.get` shows (no key), and to acquire them by their owners (see meddler.ts).
   */
  role?: 'holder' | 'meddler';
  /**
   * A shared-mode workload instead of the fenced read-modify-write on exclusive locks: a
   * `semaphore` (every acquire shared with `limit`) or a `read-write` lock (an acquire is a
   * write, exclusive, with `writeProbability`, else a read: shared at the server's maximum).
   * Writers do the fenced read-modify-write; readers and permit holders only hold.
   */
  shared?: { kind: 'semaphore'; limit: number } | { kind: 'read-write'; writeProbability: number };
  /** Clients in this process, each with its own session, looping side by side. Default 1. */
  clients?: number;
  /** Every exclusive acquire asks for this lock-delay (ms); absent: none. */
  lockDelayMs?: number;
  /** Every exclusive acquire asks for this cap on holding (ms); absent: none. */
  maxHoldMs?: number;
}

/** What a worker holds right now, as written to its status file. */
export interface WorkerStatus {
  proc: string;
  pid: number;
  holding: { name: string; token: string; phase: 'acquired' | 'read' | 'written' } | null;
}
