import { randomBytes } from 'node:crypto';
import type { AcquireRequest, QueueStep } from '@dlm/core';
import type { Current, HandOverTo, LockStore } from './zk-locks.js';
import type { EntrySpec } from './zk-paths.js';
import { type Budget, budget } from './zk-session.js';

/**
 * ZooKeeper's fast path for a release: it hands the lock to this backend's waiter that is known
 * to be at the head of the queue, in the release's own multi-op (`LockStore.handOver`): one
 * write instead of a release and the waiter's own grant. That waiter's next look reports the
 * grant without asking. Known at the head means: every waiter node that was ahead of it when it
 * last looked is gone by this backend's own hand (nodes ahead cannot appear later: sequence
 * numbers only grow). Remote waiters gone by themselves are not known gone, so then nobody is:
 * the release goes the usual way, and the queue too.
 */

/** The most waiters ahead a waiter remembers; one further back is never handed a lock. */
export const AHEAD_MAX = 16;
/** The most deleted waiter nodes remembered. */
const REMOVED_MAX = 10_000;

/** Waiter nodes whose deletion this backend saw succeed (most recent last). */
export class RemovedNodes {
  private readonly paths = new Set<string>();

  note(path: string): void {
    this.paths.add(path);
    if (this.paths.size > REMOVED_MAX) this.paths.delete(this.paths.values().next().value!);
  }

  has(path: string): boolean {
    return this.paths.has(path);
  }
}

/** What a hand-over needs of a waiter (the queue's driver). */
export interface HandOverWaiter {
  readonly spec: EntrySpec;
  readonly slot: HandOverSlot;
  /** Its waiter node's path while queued. */
  entry(): string | undefined;
}

/**
 * A release of `lease` (granted here) that hands the lock to the head waiter among `waiters`
 * (this backend's, in arrival order), in the same multi-op. False: no such waiter, or something
 * changed (nothing was applied; release it the usual way).
 */
export function handOver(
  waiters: readonly HandOverWaiter[],
  removed: RemovedNodes,
  limit: Budget,
  lease: Current,
): Promise<boolean> {
  let head: HandOverWaiter | undefined;
  for (const waiter of waiters) {
    const path = waiter.entry();
    if (path === undefined || !waiter.slot.mayBeHandedOver(removed)) continue;
    // Zero-padded sequence numbers end every waiter node's name: as strings they sort in order.
    if (!head || path.slice(-10) < head.entry()!.slice(-10)) head = waiter;
  }
  // An exclusive lease frees the name for whichever head; a shared one frees one room, for a
  // shared head with the same limit only.
  const fits =
    lease.mode === 'exclusive'
      ? lease.nameVersion !== undefined
      : head?.spec.mode === 'shared' && head.spec.limit === lease.limit;
  if (!head || !fits) return Promise.resolve(false);
  return head.slot.take(limit, lease, head.entry()!);
}

/** A waiter's side of a hand-over: the waiters it saw ahead, and a lease a release gave it. */
export class HandOverSlot {
  /** The waiter nodes ahead of ours when we last looked (undefined: not looked, or too many). */
  ahead: string[] | undefined;
  /** A release handing us the lock is on its way: our node may vanish by its hand. */
  offer: Promise<boolean> | undefined;
  /** A release handed us the lock: the grant the next look reports (`sentAt`: when it was sent). */
  private handed: { token: bigint; path: string; sentAt: number } | undefined;
  private collected = false;
  stopped = false;

  constructor(
    private readonly store: LockStore,
    private readonly request: AcquireRequest,
    private readonly to: Omit<HandOverTo, 'waiterPath'>,
    private readonly commandTimeoutMs: number,
    private readonly hooks: {
      now(): number;
      /** The hand-over took our waiter node: we are no longer queued. */
      left(path: string): void;
      /** Wake our waiter to report the grant. */
      woken(): void;
      granted(token: bigint, path: string, sentAt: number): QueueStep;
    },
  ) {}

  get taken(): boolean {
    return this.handed !== undefined;
  }

  /** Queued, at the head by what this backend knows, and not leaving: see the top. */
  mayBeHandedOver(removed: RemovedNodes): boolean {
    return !this.stopped && !this.offer && this.ahead?.every((path) => removed.has(path)) === true;
  }

  take(limit: Budget, lease: Current, waiterPath: string): Promise<boolean> {
    const sentAt = this.hooks.now();
    const attemptId = randomBytes(8).toString('hex');
    const offer = this.store
      .handOver(
        limit,
        this.request.name,
        lease,
        Object.assign({}, this.to, { waiterPath }),
        attemptId,
      )
      .then((granted) => {
        if (!granted) return false;
        this.hooks.left(waiterPath);
        this.handed = Object.assign({}, granted, { sentAt });
        if (this.stopped) this.dropUncollected();
        else this.hooks.woken();
        return true;
      })
      .finally(() => {
        this.offer = undefined;
      });
    this.offer = offer;
    return offer;
  }

  /** The handed-over grant, once: the look that reports it. */
  collect(): QueueStep | undefined {
    const handed = this.handed;
    if (!handed || this.collected) return undefined;
    this.collected = true;
    return this.hooks.granted(handed.token, handed.path, handed.sentAt);
  }

  /** The wait ended without taking the lock it was handed: release that lease. */
  dropUncollected(): void {
    const handed = this.handed;
    if (!handed || this.collected) return;
    this.collected = true;
    const { name } = this.request;
    const lease = this.store.ownLease(name, handed.token);
    if (lease) {
      const limit = budget('cleanup', this.commandTimeoutMs);
      this.store.endLease(limit, name, lease, 'released').catch(() => {});
    }
  }
}
