import { Exception } from 'node-zookeeper-client';
import type { LockStore } from './zk-locks.js';
import type { LockPaths } from './zk-paths.js';
import { budget, isZkCode, type ZkSession } from './zk-session.js';

/**
 * Garbage collection for names nobody uses any more. Holder nodes are persistent, so a lease
 * that ran out is only deleted when someone next contends for its name; a name never used again
 * would keep its holder node and its name node forever. Every `intervalMs` (± a random half, so
 * that several dlm servers spread their sweeps), the sweeper walks the name nodes once:
 *
 * - a holder whose lease is over on ZooKeeper's clock is ended (`expired`, versioned: an
 *   extension in between wins);
 * - a name node with no children whose data has not been written for a whole interval (no
 *   grant, release or expiry since) is deleted, version-checked, so a grant in between keeps
 *   it. A contender that finds it gone creates it again.
 *
 * A sweep reads every name node: its cost grows with the number of names, which is why it runs
 * rarely. `intervalMs` 0 turns it off.
 */
export function sweeper(
  session: ZkSession,
  paths: LockPaths,
  store: LockStore,
  options: { intervalMs: number; commandTimeoutMs: number; isClosed(): boolean },
): { sweepNow(): Promise<number>; stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;

  /** One pass; resolves with the number of nodes it deleted. */
  async function sweepNow(): Promise<number> {
    const step = () => budget('sweep', options.commandTimeoutMs);
    let names: string[];
    try {
      ({ children: names } = await session.getChildren(step(), paths.locks));
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return 0;
      throw error;
    }
    const nowMs = await store.zkNow(step());
    let deleted = 0;
    for (const encoded of names) {
      if (stopped || options.isClosed()) break;
      const name = paths.nameOf(encoded);
      const node = await store.nameNode(step(), name);
      if (!node) continue;
      if (node.numChildren > 0) {
        const holder = await store.currentHolder(step(), name);
        if (holder && holder.mtimeMs + holder.ttlMs <= nowMs) {
          if (await store.endLease(step(), name, holder, 'expired')) deleted += 1;
        }
        continue;
      }
      if (nowMs - node.mtimeMs < options.intervalMs) continue;
      try {
        await session.multi(step(), (ops) => ops.remove(paths.parent(name), node.version));
        store.forgetParent(name);
        deleted += 1;
      } catch (error) {
        // A child arrived, or a grant or end rewrote it: in use again, keep it.
        if (
          !isZkCode(error, Exception.NOT_EMPTY) &&
          !isZkCode(error, Exception.BAD_VERSION) &&
          !isZkCode(error, Exception.NO_NODE)
        ) {
          throw error;
        }
      }
    }
    return deleted;
  }

  function schedule(): void {
    if (stopped || options.intervalMs <= 0) return;
    const delayMs = options.intervalMs * (0.5 + Math.random());
    timer = setTimeout(() => {
      sweepNow()
        .catch(() => {})
        .finally(schedule);
    }, delayMs);
    timer.unref();
  }

  schedule();
  return {
    sweepNow,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
