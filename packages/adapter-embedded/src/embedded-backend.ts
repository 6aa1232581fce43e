import {
  type AcquireRequest,
  type AcquireResult,
  type BackendCapabilities,
  type Clock,
  DlmError,
  type Grant,
  type LockBackend,
  type LockEvent,
  type LockState,
  systemClock,
  type Timer,
} from '@dlm/core';
import { createDeadlineHeap } from './deadline-heap.js';
import { type Journal, openJournal } from './journal.js';
import type { JournalRecord } from './journal-format.js';
import type { Lease } from './lease.js';
import { createWatchers } from './watchers.js';

export interface EmbeddedBackendOptions {
  /**
   * Where the journal and the fencing high-water mark live. Without it the backend is purely
   * in memory: held locks and tokens are lost when the process ends.
   */
  dataDir?: string;
  /** Monotonic time and timers (default `systemClock`); tests inject a manual clock. */
  clock?: Clock;
  /**
   * How long journal records wait to be batched into one write + fsync. 0 (the default)
   * batches the records of one event-loop turn.
   */
  flushIntervalMs?: number;
  /** Tokens are reserved on disk this many at a time (default 1,000). */
  tokenBlockSize?: number;
  /** Where recovery and listener problems are reported (default `console.error`). */
  logger?: (line: string) => void;
  /**
   * How long an operation waits for its journal record to reach the disk before it fails with
   * UNAVAILABLE (indeterminate). Default 2,000.
   */
  commandTimeoutMs?: number;
  /** The journal is rewritten as a snapshot once it grows past this (default 64 MiB). */
  compactAfterBytes?: number;
}

/** setTimeout's ceiling; a longer wait is re-armed when it fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The in-process backend: every lock lives in this process's memory, each primitive is a few
 * map and heap operations, and — with `dataDir` — a journal makes held locks and fencing tokens
 * survive a crash.
 *
 * @example
 * const backend = await embeddedBackend({ dataDir: '/var/lib/dlm' });
 * const result = await backend.tryAcquire({ name: 'jobs/nightly', owner: 'worker-1', ttlMs: 30_000 });
 * if (result.granted) console.log('fencing token', result.grant.token);
 */
export async function embeddedBackend(options: EmbeddedBackendOptions = {}): Promise<LockBackend> {
  const clock = options.clock ?? systemClock;
  const log = options.logger ?? ((line: string) => console.error(line));
  const blockSize = BigInt(positiveInteger(options.tokenBlockSize, 1000, 'tokenBlockSize'));

  const leases = new Map<string, Lease>();
  const heap = createDeadlineHeap();
  const watchers = createWatchers(log);
  let nextToken = 1n;
  /** With a journal: tokens up to here are covered by a persisted high-water mark. */
  let reservedEnd = 0n;
  let closed = false;
  let timer: Timer | undefined;
  let timerAt = Number.POSITIVE_INFINITY;

  let journal: Journal | undefined;
  if (options.dataDir !== undefined) {
    journal = await openJournal({
      dataDir: options.dataDir,
      flushIntervalMs: Math.max(0, options.flushIntervalMs ?? 0),
      commandTimeoutMs: positiveInteger(options.commandTimeoutMs, 2000, 'commandTimeoutMs'),
      compactAfterBytes: positiveInteger(
        options.compactAfterBytes,
        64 * 1024 * 1024,
        'compactAfterBytes',
      ),
      log,
      snapshot,
    });
    const { leases: recovered, highWater } = journal.recovered;
    reservedEnd = highWater;
    nextToken = highWater + 1n;
    const now = clock.now();
    const wallNow = Date.now();
    for (const held of recovered.values()) {
      // The monotonic clock restarted with the process, so the lease is counted in full from
      // now: its holder may still believe in it for that long. Only a wall clock showing the
      // whole TTL gone since the record drops it early.
      if (wallNow - held.wallMs >= held.ttlMs) continue;
      const lease: Lease = {
        name: held.name,
        owner: held.owner,
        token: held.token,
        keyHash: held.keyHash,
        deadline: now + held.ttlMs,
        heapIndex: -1,
      };
      leases.set(lease.name, lease);
      heap.push(lease);
    }
    armTimer();
  }

  function snapshot(): JournalRecord[] {
    const now = clock.now();
    const wallMs = Date.now();
    const records: JournalRecord[] = [{ type: 'high-water', token: reservedEnd }];
    for (const lease of leases.values()) {
      const ttlMs = Math.ceil(lease.deadline - now);
      if (ttlMs <= 0) continue;
      records.push({
        type: 'grant',
        name: lease.name,
        owner: lease.owner,
        token: lease.token,
        ttlMs,
        wallMs,
        keyHash: lease.keyHash,
      });
    }
    return records;
  }

  function armTimer(): void {
    const first = heap.peek();
    if (first === undefined || (timer !== undefined && timerAt <= first.deadline)) return;
    timer?.cancel();
    timerAt = first.deadline;
    // Rounded up: a timer that fires a fraction early would only re-arm.
    const delayMs = Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(first.deadline - clock.now())));
    timer = clock.setTimer(onTimer, delayMs);
  }

  function onTimer(): void {
    timer = undefined;
    timerAt = Number.POSITIVE_INFINITY;
    if (closed) return;
    const now = clock.now();
    for (
      let first = heap.peek();
      first !== undefined && first.deadline <= now;
      first = heap.peek()
    ) {
      end(first, 'expired');
    }
    watchers.drain();
    armTimer();
  }

  /** Frees the lock: state first, then the journal record and the event. */
  function end(lease: Lease, type: LockEvent['type']): Promise<void> | undefined {
    leases.delete(lease.name);
    heap.remove(lease);
    const durable = journal?.append({ type: 'end', name: lease.name, token: lease.token });
    if (watchers.has(lease.name)) {
      watchers.enqueue({ name: lease.name, type, token: lease.token, owner: lease.owner });
    }
    return durable;
  }

  /** The current lease of `name`, ending it first when its deadline has passed. */
  function current(name: string, now: number): Lease | undefined {
    const lease = leases.get(name);
    if (lease === undefined || lease.deadline > now) return lease;
    // The timer has not fired yet (it is due in this very turn, or the clock was moved): the
    // lease is over all the same, and says so before anything else happens to the name.
    end(lease, 'expired');
    return undefined;
  }

  function takeToken(): bigint {
    const token = nextToken++;
    if (journal !== undefined && token > reservedEnd) {
      // The mark goes into the same batch as the grant that needs it, so no reply reports a
      // token from a block whose reservation is not on disk.
      reservedEnd += blockSize;
      journal.reserve(reservedEnd);
    }
    return token;
  }

  function refuse(): DlmError | undefined {
    if (closed) return new DlmError('UNAVAILABLE', 'the embedded backend is closed');
    return journal?.failure;
  }

  /** Resolves with `value` once `durable` (the batch holding the operation's records) is on disk. */
  function reply<T>(value: T, durable: Promise<void> | undefined): Promise<T> {
    return durable === undefined ? Promise.resolve(value) : durable.then(() => value);
  }

  const capabilities: BackendCapabilities = {
    fencing: 'strict',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    durableAcrossRestart: journal !== undefined,
    fairQueue: false,
    expiryEvents: true,
  };

  return {
    kind: 'embedded',
    capabilities,

    tryAcquire({ name, owner, ttlMs, keyHash }: AcquireRequest): Promise<AcquireResult> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const ttl = leaseMs(ttlMs);
      if (ttl === undefined) return Promise.reject(invalidTtl());
      const now = clock.now();
      let lease = current(name, now);
      // The same owner without the lease's key is another requester (a copied owner label).
      if (lease !== undefined && (lease.owner !== owner || lease.keyHash !== keyHash)) {
        watchers.drain();
        return Promise.resolve({ granted: false, ttlRemainingMs: remainingMs(lease, now) });
      }
      if (lease === undefined) {
        lease = { name, owner, token: takeToken(), keyHash, deadline: now + ttl, heapIndex: -1 };
        leases.set(name, lease);
        heap.push(lease);
        if (watchers.has(name)) {
          watchers.enqueue({ name, type: 'acquired', token: lease.token, owner });
        }
      } else {
        // The same owner again (a re-sent acquire): same token, lease refreshed.
        lease.deadline = now + ttl;
        heap.update(lease);
      }
      armTimer();
      const durable = journal?.append({
        type: 'grant',
        name,
        owner,
        token: lease.token,
        ttlMs: ttl,
        wallMs: Date.now(),
        keyHash,
      });
      watchers.drain();
      const granted = lease;
      const result: AcquireResult = {
        granted: true,
        grant: { name, owner, token: granted.token, ttlMs: ttl },
      };
      if (durable === undefined) return Promise.resolve(result);
      return durable.then(() => {
        // Never report a grant that ran out (or changed hands) while its record was synced.
        if (leases.get(name) === granted && granted.deadline > clock.now()) return result;
        const holder = leases.get(name);
        return { granted: false, ttlRemainingMs: holder ? remainingMs(holder, clock.now()) : 0 };
      });
    },

    release({ name, token, keyHash }): Promise<boolean> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const lease = current(name, clock.now());
      if (lease === undefined || !holds(lease, token, keyHash)) {
        watchers.drain();
        return Promise.resolve(false);
      }
      const durable = end(lease, 'released');
      watchers.drain();
      return reply(true, durable);
    },

    extend({ name, token, ttlMs, keyHash }): Promise<Grant | null> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const ttl = leaseMs(ttlMs);
      if (ttl === undefined) return Promise.reject(invalidTtl());
      const now = clock.now();
      const lease = current(name, now);
      if (lease === undefined || !holds(lease, token, keyHash)) {
        watchers.drain();
        return Promise.resolve(null);
      }
      lease.deadline = now + ttl;
      heap.update(lease);
      armTimer();
      const durable = journal?.append({
        type: 'extend',
        name,
        token,
        ttlMs: ttl,
        wallMs: Date.now(),
      });
      const grant: Grant = { name, owner: lease.owner, token, ttlMs: ttl };
      if (durable === undefined) return Promise.resolve(grant);
      return durable.then(() =>
        leases.get(name) === lease && lease.deadline > clock.now() ? grant : null,
      );
    },

    inspect(name): Promise<LockState | null> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const now = clock.now();
      const lease = current(name, now);
      watchers.drain();
      if (lease === undefined) return Promise.resolve(null);
      return Promise.resolve(state(lease, now));
    },

    watch(name, listener) {
      if (closed) return () => {};
      return watchers.watch(name, listener);
    },

    revoke(name): Promise<boolean> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const lease = current(name, clock.now());
      if (lease === undefined) {
        watchers.drain();
        return Promise.resolve(false);
      }
      const durable = end(lease, 'revoked');
      watchers.drain();
      return reply(true, durable);
    },

    list(prefix): Promise<LockState[]> {
      const refused = refuse();
      if (refused !== undefined) return Promise.reject(refused);
      const now = clock.now();
      const found: LockState[] = [];
      // Expired leases the timer has not reached yet are skipped, not ended: ending them here
      // would mutate the map under iteration, and the timer is about to.
      for (const lease of leases.values()) {
        if (lease.deadline > now && lease.name.startsWith(prefix)) found.push(state(lease, now));
      }
      found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      return Promise.resolve(found);
    },

    async close() {
      if (closed) return;
      closed = true;
      timer?.cancel();
      timer = undefined;
      watchers.clear();
      await journal?.close();
    },
  };
}

/** The token, and the key's hash when one is presented (absent: an operator's token-only call). */
function holds(lease: Lease, token: bigint, keyHash: string | undefined): boolean {
  return lease.token === token && (keyHash === undefined || lease.keyHash === keyHash);
}

function state(lease: Lease, now: number): LockState {
  return {
    name: lease.name,
    owner: lease.owner,
    token: lease.token,
    ttlRemainingMs: remainingMs(lease, now),
  };
}

/** Whole milliseconds, rounded up: a held lease never reports 0 remaining. */
function remainingMs(lease: Lease, now: number): number {
  return Math.ceil(lease.deadline - now);
}

/** The lease actually granted: at least 1 ms, whole milliseconds; undefined when not a number. */
function leaseMs(ttlMs: number): number | undefined {
  if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs)) return undefined;
  return Math.max(1, Math.ceil(ttlMs));
}

function invalidTtl(): DlmError {
  return new DlmError('INVALID_PARAMS', 'ttlMs must be a finite number of milliseconds', {
    field: 'ttlMs',
  });
}

function positiveInteger(value: number | undefined, fallback: number, field: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new DlmError('INVALID_PARAMS', `${field} must be a positive integer`, { field });
  }
  return value;
}
