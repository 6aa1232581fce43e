import type { ManagedProcess } from './process.js';

/**
 * What an etcd cluster and a ZooKeeper ensemble share, whether their members are processes or
 * containers: the members, who leads, waiting for a leader, and killing them all.
 */

export interface MemberSet<M> {
  readonly members: M[];
  /** The member that leads right now, or undefined when none answers as leader. */
  leader(): Promise<M | undefined>;
  /** Resolves once some running member leads (after kills and restarts). */
  waitForLeader(timeoutMs?: number): Promise<M>;
  /** Kills every member (SIGKILL). Safe to call twice. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `findLeader` asks the members who leads; `what` names the service in the timeout error, and
 * `defaultTimeoutMs` is how long `waitForLeader()` waits when not told.
 */
export function memberSet<M extends { readonly process: ManagedProcess }>(
  members: M[],
  findLeader: (members: M[]) => Promise<M | undefined>,
  what: string,
  defaultTimeoutMs: number,
): MemberSet<M> {
  return {
    members,
    leader: () => findLeader(members),
    async waitForLeader(timeoutMs = defaultTimeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const leader = await findLeader(members);
        if (leader) return leader;
        if (Date.now() > deadline) throw new Error(`${what}: no leader elected in time`);
        await sleep(100);
      }
    },
    async stop() {
      await Promise.all(members.map((member) => member.process.kill()));
    },
  };
}

/** Each member with its answer to `ask`, asked in parallel; members not running answer undefined. */
export function askRunning<M extends { readonly process: ManagedProcess }, A>(
  members: M[],
  ask: (member: M) => Promise<A | undefined>,
): Promise<{ member: M; answer: A | undefined }[]> {
  return Promise.all(
    members.map(async (member) => ({
      member,
      answer: member.process.running ? await ask(member) : undefined,
    })),
  );
}
