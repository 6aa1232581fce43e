import { waiters } from './zk-paths.js';
import type { QueueContext } from './zk-queue.js';
import type { Budget, ZkSession } from './zk-session.js';
import { budget } from './zk-session.js';

// What ZooKeeper's queue counts: its waiters, and one waiter's place (issue 31's "who am I
// waiting behind"): reads beside the driver's multi-ops, never a grant.

/** How many waiter nodes queue for `name`, in one read. */
export async function countWaiters(context: QueueContext, name: string): Promise<number> {
  const limit: Budget = budget('inspect', context.commandTimeoutMs);
  return (await context.store.childrenOf(limit, name))?.waiters.length ?? 0;
}

/**
 * One waiter's place among the waiter nodes (sequence order), read with a watch on the name's
 * children: entries ahead leaving are not otherwise seen by a waiter (each watches one node).
 * The watch is one function for the waiter's life, so re-reads never pile watchers up.
 */
export class QueuePlace {
  private moved: (() => void) | undefined;
  private readonly onChildren = () => this.moved?.();

  constructor(
    private readonly session: ZkSession,
    private readonly commandTimeoutMs: number,
  ) {}

  /** My 1-based place, or undefined once my node is gone; `moved` is told of a change. */
  async read(parent: string, mine: string | undefined, moved: () => void) {
    if (mine === undefined) return undefined;
    this.moved = moved;
    const limit = budget('inspect', this.commandTimeoutMs);
    const { children } = await this.session.getChildren(limit, parent, this.onChildren);
    const place = waiters(children).indexOf(mine.slice(parent.length + 1));
    return place < 0 ? undefined : place + 1;
  }

  /** No more changes are told (ZooKeeper's watch cannot be taken back; a late one is dropped). */
  stop(): void {
    this.moved = undefined;
  }
}
