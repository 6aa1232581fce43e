import { type Clock, isDlmError, parseToken } from '@dlm/core';
import type { ResultOf } from '@dlm/protocol';
import type { Connection } from './connection.js';
import type { HeldLeases } from './held-leases.js';
import { driftMarginMs } from './lease.js';

/** What cleaning up needs from the client. */
export interface CleanupContext {
  readonly clock: Clock;
  readonly connection: Connection;
  readonly held: HeldLeases;
  /** A closed client retries nothing. */
  readonly closed: boolean;
}

/** A release or an orphan cleanup to retry once there is a connection again. */
type Cleanup =
  | { kind: 'release'; name: string; token: bigint; leaseKey: string; untilMs: number }
  | { kind: 'orphan'; name: string; owner: string; leaseKey: string; untilMs: number };

/**
 * Frees, without a waiting caller, what this client may still hold on the server: a lease
 * whose release failed or whose deadline passed, a grant that arrived after its caller gave
 * up, an acquire whose reply was lost. What fails for want of a connection is kept and tried
 * again after the next session starts, for as long as the lease could still be held.
 */
export class BackgroundCleanup {
  private pending: Cleanup[] = [];

  constructor(private readonly context: CleanupContext) {}

  /** Releases without a waiting caller; retried after a reconnect while it can still matter. */
  release(name: string, token: bigint, leaseKey: string, ttlMs: number): void {
    const { clock, connection } = this.context;
    const untilMs = clock.now() + ttlMs + driftMarginMs(ttlMs);
    connection
      .call('lock.release', { name, token: token.toString(), leaseKey }, { write: true })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !this.context.closed) {
          this.pending.push({ kind: 'release', name, token, leaseKey, untilMs });
        }
      });
  }

  /** An acquire by `owner` may have been granted unseen: free it once it can be looked up. */
  orphaned(
    name: string,
    owner: string,
    leaseKey: string,
    ownerIsOurs: boolean,
    ttlMs: number,
  ): void {
    const { clock, connection, closed } = this.context;
    // Only an owner this client made up is known to be nobody else's.
    if (ownerIsOurs && !closed) {
      this.pending.push({ kind: 'orphan', name, owner, leaseKey, untilMs: clock.now() + ttlMs });
      if (connection.session) this.run();
    }
  }

  /** A grant that arrived after its caller stopped waiting: give it back. */
  discardGrant(result: ResultOf<'lock.acquire'>, leaseKey: string, ttlMs: number): void {
    let token: bigint;
    try {
      token = parseToken(result.token);
    } catch {
      return;
    }
    // With a caller-chosen owner this may be a re-entry of a lease still in use here.
    if (this.context.held.has(result.name, token)) return;
    this.release(result.name, token, leaseKey, ttlMs);
  }

  /** A session exists again: try what is still worth trying. */
  run(): void {
    const now = this.context.clock.now();
    const due = this.pending.filter((cleanup) => cleanup.untilMs > now);
    this.pending = [];
    for (const cleanup of due) {
      if (cleanup.kind === 'release') {
        this.release(cleanup.name, cleanup.token, cleanup.leaseKey, cleanup.untilMs - now);
      } else this.lookUpOrphan(cleanup.name, cleanup.owner, cleanup.leaseKey, cleanup.untilMs);
    }
  }

  clear(): void {
    this.pending = [];
  }

  /** An acquire whose reply was lost may have been granted: find out and free it. */
  private lookUpOrphan(name: string, owner: string, leaseKey: string, untilMs: number): void {
    const { clock, connection } = this.context;
    connection
      .call('lock.get', { name })
      .then((state) => {
        // Released with the acquire's key: if someone else holds it by now, that is NOT_HOLDER.
        if (state.held && state.owner === owner) {
          this.release(name, parseToken(state.token), leaseKey, untilMs - clock.now());
        }
      })
      .catch((error: unknown) => {
        if (isDlmError(error, 'UNAVAILABLE') && !this.context.closed) {
          this.pending.push({ kind: 'orphan', name, owner, leaseKey, untilMs });
        }
      });
  }
}
