import { backgroundTimer, type Clock, systemClock, type Timer } from '@dlm/core';
import { Exception } from 'node-zookeeper-client';
import { delayEndOf } from './zk-data.js';
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
/** Name nodes a sweep works on at once. */
const SWEEP_LANES = 16;

export function sweeper(
  session: ZkSession,
  paths: LockPaths,
  store: LockStore,
  options: {
    intervalMs: number;
    commandTimeoutMs: number;
    isClosed(): boolean;
    /** Where the sweeps are scheduled and their steps' budgets counted. */
    clock?: Clock;
  },
): { sweepNow(): Promise<number>; stop(): void } {
  const clock = options.clock ?? systemClock;
  let timer: Timer | undefined;
  let stopped = false;

  /** One pass; resolves with the number of nodes it deleted. */
  async function sweepNow(): Promise<number> {
    const step = () => budget('sweep', options.commandTimeoutMs, clock);
    let names: string[];
    try {
      ({ children: names } = await session.getChildren(step(), paths.locks));
    } catch (error) {
      if (isZkCode(error, Exception.NO_NODE)) return 0;
      throw error;
    }
    const nowMs = await store.zkNow(step());

    /** One name node; resolves with how many nodes it deleted. */
    async function sweepOne(encoded: string): Promise<number> {
      const name = paths.nameOf(encoded);
      const node = await store.nameNode(step(), name);
      if (!node) return 0;
      if (node.numChildren > 0) {
        const { holders } = await store.allHolders(step(), name);
        let ended = 0;
        for (const holder of holders) {
          if (holder.mtimeMs + holder.ttlMs > nowMs) continue;
          if (await store.endLease(step(), name, holder, 'expired')) ended += 1;
        }
        return ended;
      }
      if (nowMs - node.mtimeMs < options.intervalMs) return 0;
      // Its end marker holds a lock-delay that still runs: deleting it would end the delay.
      if ((delayEndOf(node) ?? 0) > nowMs) return 0;
      try {
        await session.multi(step(), (ops) => ops.remove(paths.parent(name), node.version));
        store.forgetParent(name);
        return 1;
      } catch (error) {
        // A child arrived, or a grant or end rewrote it: in use again, keep it.
        if (
          !isZkCode(error, Exception.NOT_EMPTY) &&
          !isZkCode(error, Exception.BAD_VERSION) &&
          !isZkCode(error, Exception.NO_NODE)
        ) {
          throw error;
        }
        return 0;
      }
    }

    // A few names at a time: one by one, each name's round trips add up to minutes for
    // 100 000 names (and the sweep is what brings them back to nothing); every step is its
    // own versioned operation, so their order does not matter.
    let deleted = 0;
    let next = 0;
    let failed = false;
    async function lane(): Promise<void> {
      while (next < names.length && !failed && !stopped && !options.isClosed()) {
        const encoded = names[next++]!;
        try {
          // Not `deleted += await …`: that reads `deleted` before the await, and lanes interleave.
          const count = await sweepOne(encoded);
          deleted += count;
        } catch (error) {
          failed = true;
          throw error;
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(SWEEP_LANES, names.length) }, lane));
    return deleted;
  }

  function schedule(): void {
    if (stopped || options.intervalMs <= 0) return;
    const delayMs = options.intervalMs * (0.5 + Math.random());
    timer = backgroundTimer(
      clock,
      () => {
        sweepNow()
          .catch(() => {})
          .finally(schedule);
      },
      delayMs,
    );
  }

  schedule();
  return {
    sweepNow,
    stop() {
      stopped = true;
      timer?.cancel();
    },
  };
}
