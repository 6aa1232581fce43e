import { type Clock, DlmError, systemClock, type Timer } from '@dlm/core';
import type { Etcd3, IDuplexStream, ILeaseKeepAliveRequest, ILeaseKeepAliveResponse } from 'etcd3';
import { type Budget, budget, withRetries } from './etcd-calls.js';

const SECOND = 1_000;

export function ttlSeconds(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / SECOND));
}

/** A lease for one lock key, counted from `sentAt` (or later) on etcd's side. */
export interface LockLease {
  id: string;
  /** The TTL etcd granted (whole seconds, in ms). */
  ttlMs: number;
  /** The pool's `clock.now()` when the grant or renewal was sent: the lease ends no earlier than `sentAt + ttlMs`. */
  sentAt: number;
}

/**
 * Where lock keys' leases come from. Every grant or renewal of a lease is a Raft proposal (a
 * disk sync on a quorum) except a keepalive, which etcd's leader answers from memory. So a lease
 * whose key is gone (released, moved to another lease by extend or re-acquire, or never put
 * because the lock was held) is kept, and the next grant of the same TTL renews it with one
 * keepalive instead of granting a new one; the old one needs no revocation either. A release is
 * then one transaction, and an acquire one keepalive plus one transaction.
 *
 * Why reuse is safe: a lease is pooled only after a transaction of this backend detached the
 * last key from it (its reply shows the key's previous lease) or proved it never attached one,
 * and only leases this backend granted are pooled; anyone else's go back to etcd (revoked). Each
 * pooled lease is handed to one grant at a time. A keepalive's answer is authoritative: TTL > 0
 * means etcd's leader restarted the lease's full TTL when it answered, which is after the
 * keepalive was sent, so the grant's lease runs at least `ttlMs` from `sentAt`, as a fresh grant
 * does; TTL 0 (the lease ran out or was revoked) or any failure means a fresh grant instead.
 * Pooled leases are never revoked (they just run out), so a mistake about which keys hang on a
 * lease can only keep a lock longer, never end one early.
 */
export interface LeasePool {
  /** A lease of `ttlMs` (rounded up to whole seconds) that runs from now: reused or fresh. */
  take(limit: Budget, ttlMs: number): Promise<LockLease>;
  /**
   * A pooled lease of `ttlMs` (rounded up to whole seconds) for a transaction sent before its
   * renewal is confirmed (with the renewal, or before it); undefined when none is pooled. It is
   * not reused until given back with `detached`.
   */
  reserve(ttlMs: number): ReservedLease | undefined;
  /**
   * A transaction of this backend took the last key off this lease, or the lease was taken
   * for a transaction that did not put its key. Reused when it is ours; revoked otherwise.
   */
  detached(id: string | undefined): void;
  close(): void;
}

/** A pooled lease handed out before its renewal (see `LeasePool.reserve`). */
export interface ReservedLease {
  id: string;
  /**
   * Sends the renewal (once; later calls give the same answer): the lease counted from when it
   * was sent once etcd restarted its TTL, or undefined when it did not (the lease ran out or
   * was revoked, or no answer came in time). A key put on the lease must not be reported held
   * before the renewal is confirmed; without confirmation it has to move to another lease. A
   * transaction etcd refused because the lease is gone applied nothing. Give the lease back
   * only once a renewal that was sent has settled.
   */
  renew(limit: Budget): Promise<LockLease | undefined>;
}

/** Leases closer than this to running out are not reused (etcd's lessor checks every 500 ms). */
const REUSE_MARGIN_MS = 1_500;
/** Pooled leases beyond this are revoked: enough for as many locks in flight at once. */
const MAX_POOLED = 1_024;
/** The longest one keepalive may take before the grant falls back to a new lease. */
const KEEPALIVE_TIMEOUT_MS = 500;

interface Known {
  /** The requested TTL in seconds: the pool's key (etcd may have raised the granted one). */
  seconds: number;
  ttlMs: number;
  sentAt: number;
}

type KeepAliveStream = IDuplexStream<ILeaseKeepAliveRequest, ILeaseKeepAliveResponse>;

/** One keepalive stream shared by every renewal; answers are matched to requests by lease id. */
function keepAliveChannel(client: Etcd3, clock: Clock) {
  let current: Promise<KeepAliveStream> | undefined;
  const pending = new Map<string, { resolve(ttl: number): void; reject(error: Error): void }>();

  function reset(which: Promise<KeepAliveStream>, error: Error): void {
    if (current !== which) return;
    current = undefined;
    for (const waiter of pending.values()) waiter.reject(error);
    pending.clear();
    which.then((stream) => stream.cancel()).catch(() => {});
  }

  function open(): Promise<KeepAliveStream> {
    const opened: Promise<KeepAliveStream> = client.leaseClient.leaseKeepAlive().then((stream) => {
      stream.on('data', (response) => {
        // A late answer on a stream given up on may be about an earlier keepalive of a lease
        // asked for again since: only the current stream's answers count.
        if (current !== opened) return;
        const waiter = pending.get(response.ID);
        if (!waiter) return;
        pending.delete(response.ID);
        waiter.resolve(Number(response.TTL));
      });
      stream.on('error', (error) => reset(opened, error));
      stream.on('end', () => reset(opened, new Error('keepalive stream ended')));
      return stream;
    });
    opened.catch((error: Error) => reset(opened, error));
    return opened;
  }

  return {
    /** Resolves with the lease's renewed TTL in seconds (0 when the lease is gone). */
    async renew(id: string, timeoutMs: number): Promise<number> {
      if (pending.has(id)) throw new Error('a keepalive for this lease is already in flight');
      current ??= open();
      const stream = current;
      let timer: Timer | undefined;
      try {
        return await new Promise<number>((resolve, reject) => {
          pending.set(id, { resolve, reject });
          timer = clock.setTimer(() => {
            // A member that does not answer (paused, blackholed) holds up every renewal on the
            // stream: start a new one, possibly on another member, next time.
            reset(stream, new Error('keepalive timed out'));
            reject(new Error('keepalive timed out'));
          }, timeoutMs);
          stream.then((opened) => opened.write({ ID: id })).catch(reject);
        });
      } finally {
        timer?.cancel();
        pending.delete(id);
      }
    },
    close(): void {
      if (current) reset(current, new Error('closed'));
    },
  };
}

/** `clock`: what `sentAt` and the keepalive time-outs are measured on. */
export function leasePool(
  client: Etcd3,
  commandTimeoutMs: number,
  clock: Clock = systemClock,
): LeasePool {
  /** Leases this backend granted or renewed, oldest renewal first (pruned once they ran out). */
  const known = new Map<string, Known>();
  /** Per requested TTL in seconds, leases with no key on them, most recently renewed last. */
  const pool = new Map<number, string[]>();
  const pooled = new Set<string>();
  const keepAlive = keepAliveChannel(client, clock);
  let closed = false;

  const endsBy = (entry: Known) => entry.sentAt + entry.ttlMs;

  function note(id: string, entry: Known): void {
    known.delete(id);
    known.set(id, entry);
    const now = clock.now();
    for (const [oldId, old] of known) {
      if (endsBy(old) > now) break;
      known.delete(oldId);
      pooled.delete(oldId);
    }
  }

  function revoke(id: string): void {
    if (closed) return;
    withRetries(budget('revoke lease', commandTimeoutMs, clock), 'once', true, (deadline) =>
      client.leaseClient.leaseRevoke({ ID: id }, { deadline }),
    ).catch(() => {});
  }

  async function grant(limit: Budget, seconds: number): Promise<LockLease> {
    const sentAt = clock.now();
    // Granting twice (a retry after a lost reply) only leaves an unused lease, which etcd
    // drops when it runs out.
    const response = await withRetries(limit, 'idempotent', false, (deadline) =>
      client.leaseClient.leaseGrant({ TTL: seconds }, { deadline }),
    );
    if (response.error) {
      throw new DlmError('UNAVAILABLE', `${limit.what}: lease grant failed: ${response.error}`);
    }
    const lease = { id: response.ID, ttlMs: Number(response.TTL) * SECOND, sentAt };
    note(lease.id, { seconds, ttlMs: lease.ttlMs, sentAt });
    return lease;
  }

  /** The most recently renewed pooled lease of this TTL that is not about to run out. */
  function pooledLease(seconds: number): string | undefined {
    const stack = pool.get(seconds);
    const now = clock.now();
    for (let id = stack?.pop(); id !== undefined; id = stack?.pop()) {
      if (!pooled.delete(id)) continue;
      const entry = known.get(id);
      if (entry && endsBy(entry) - now > REUSE_MARGIN_MS) return id;
      // About to run out: etcd ends it by itself.
    }
    return undefined;
  }

  /** Renews a pooled lease: the lease counted from when the keepalive was sent, or undefined. */
  async function renew(limit: Budget, id: string, seconds: number): Promise<LockLease | undefined> {
    const sentAt = clock.now();
    try {
      const timeoutMs = Math.min(KEEPALIVE_TIMEOUT_MS, limit.remainingMs() / 2);
      const ttl = timeoutMs > 0 ? await keepAlive.renew(id, timeoutMs) : 0;
      if (ttl > 0) {
        const lease = { id, ttlMs: ttl * SECOND, sentAt };
        note(id, { seconds, ttlMs: lease.ttlMs, sentAt });
        return lease;
      }
    } catch {
      // Not renewed (or not known to be): it runs out by itself.
    }
    known.delete(id);
    return undefined;
  }

  return {
    async take(limit, ttlMs) {
      const seconds = ttlSeconds(ttlMs);
      const reused = pooledLease(seconds);
      const renewed = reused === undefined ? undefined : await renew(limit, reused, seconds);
      return renewed ?? grant(limit, seconds);
    },

    reserve(ttlMs) {
      const seconds = ttlSeconds(ttlMs);
      const id = pooledLease(seconds);
      if (id === undefined) return undefined;
      let renewed: Promise<LockLease | undefined> | undefined;
      return {
        id,
        renew(limit) {
          renewed ??= renew(limit, id, seconds);
          return renewed;
        },
      };
    },

    detached(id) {
      if (!id || id === '0' || closed) return;
      const entry = known.get(id);
      if (!entry) {
        // Not ours (granted by another dlm server), or forgotten because it ran out.
        revoke(id);
        return;
      }
      if (pooled.has(id) || endsBy(entry) - clock.now() <= REUSE_MARGIN_MS) return;
      if (pooled.size >= MAX_POOLED) {
        known.delete(id);
        revoke(id);
        return;
      }
      let stack = pool.get(entry.seconds);
      if (!stack) {
        stack = [];
        pool.set(entry.seconds, stack);
      } else if (stack.length > pooled.size + 64) {
        // Leases forgotten because they ran out are still listed here: drop them.
        stack = stack.filter((listed) => pooled.has(listed));
        pool.set(entry.seconds, stack);
      }
      stack.push(id);
      pooled.add(id);
    },

    close() {
      closed = true;
      keepAlive.close();
      pool.clear();
      pooled.clear();
      known.clear();
    },
  };
}
