import type * as core from '@dlm/core';
import { DlmError, systemClock } from '@dlm/core';
import { createDeadlineHeap } from './deadline-heap.js';
import { type Journal, openJournal } from './journal.js';
import type { JournalRecord } from './journal-format.js';
import type { Lease } from './lease.js';
import { createWatchers, type Watchers } from './watchers.js';

export interface EmbeddedBackendOptions {
  /**
   * Where the journal and the fencing high-water mark live. Without it the backend is purely
   * in memory: held locks and tokens are lost when the process ends.
   */
  dataDir?: string;
  /** Monotonic time and timers (default `systemClock`); tests inject a manual clock. */
  clock?: core.Clock;
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
export async function embeddedBackend(
  options: EmbeddedBackendOptions = {},
): Promise<core.LockBackend> {
  const clock = options.clock ?? systemClock;
  const log = options.logger ?? ((line: string) => console.error(line));
  const blockSize = BigInt(positiveInteger(options.tokenBlockSize, 1000, 'tokenBlockSize'));
  const store = new EmbeddedStore(clock, log, blockSize);
  if (options.dataDir !== undefined) {
    const journal = await openJournal({
      dataDir: options.dataDir,
      flushIntervalMs: Math.max(0, options.flushIntervalMs ?? 0),
      commandTimeoutMs: positiveInteger(options.commandTimeoutMs, 2000, 'commandTimeoutMs'),
      compactAfterBytes: positiveInteger(
        options.compactAfterBytes,
        64 * 1024 * 1024,
        'compactAfterBytes',
      ),
      log,
      snapshot: () => store.snapshot(),
    });
    store.recover(journal);
  }
  const capabilities: core.BackendCapabilities = {
    fencing: 'strict',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    durableAcrossRestart: options.dataDir !== undefined,
    fairQueue: false,
    expiryEvents: true,
  };
  return {
    kind: 'embedded',
    capabilities,
    tryAcquire: (request) => store.tryAcquire(request),
    release: (proof) => store.release(proof),
    extend: (request) => store.extend(request),
    inspect: (name) => store.inspect(name),
    watch: (name, listener) => store.watch(name, listener),
    revoke: (name) => store.revoke(name),
    list: (prefix) => store.list(prefix),
    close: () => store.close(),
  };
}

/** The locks of one embedded backend: a map, a deadline heap, watchers and (maybe) a journal. */
class EmbeddedStore {
  private readonly leases = new Map<string, Lease>();
  private readonly heap = createDeadlineHeap();
  private readonly watchers: Watchers;
  private nextToken = 1n;
  /** With a journal: tokens up to here are covered by a persisted high-water mark. */
  private reservedEnd = 0n;
  private closed = false;
  private timer: core.Timer | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private journal: Journal | undefined;

  constructor(
    private readonly clock: core.Clock,
    log: (line: string) => void,
    private readonly blockSize: bigint,
  ) {
    this.watchers = createWatchers(log);
  }

  /** Takes over the journal and the leases it recovered. */
  recover(journal: Journal): void {
    this.journal = journal;
    const { leases: recovered, highWater } = journal.recovered;
    this.reservedEnd = highWater;
    this.nextToken = highWater + 1n;
    const now = this.clock.now();
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
      this.leases.set(lease.name, lease);
      this.heap.push(lease);
    }
    // The journal's own copy is not read again, and it would stay as long as the journal: a
    // record and a map entry more for every recovered lease.
    recovered.clear();
    this.armTimer();
  }

  snapshot(): JournalRecord[] {
    const now = this.clock.now();
    const wallMs = Date.now();
    const records: JournalRecord[] = [{ type: 'high-water', token: this.reservedEnd }];
    for (const lease of this.leases.values()) {
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

  private armTimer(): void {
    const first = this.heap.peek();
    if (first === undefined || (this.timer !== undefined && this.timerAt <= first.deadline)) return;
    this.timer?.cancel();
    this.timerAt = first.deadline;
    // Rounded up: a timer that fires a fraction early would only re-arm.
    const delayMs = Math.min(
      MAX_TIMER_MS,
      Math.max(0, Math.ceil(first.deadline - this.clock.now())),
    );
    this.timer = this.clock.setTimer(() => this.onTimer(), delayMs);
  }

  private onTimer(): void {
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    if (this.closed) return;
    const now = this.clock.now();
    for (
      let first = this.heap.peek();
      first !== undefined && first.deadline <= now;
      first = this.heap.peek()
    ) {
      this.end(first, 'expired');
    }
    this.watchers.drain();
    this.armTimer();
  }

  /** Frees the lock: state first, then the journal record and the event. */
  private end(lease: Lease, type: core.LockEvent['type']): Promise<void> | undefined {
    this.leases.delete(lease.name);
    this.heap.remove(lease);
    const durable = this.journal?.append({
      type: 'end',
      name: lease.name,
      token: lease.token,
    });
    if (this.watchers.has(lease.name)) {
      this.watchers.enqueue({ name: lease.name, type, token: lease.token, owner: lease.owner });
    }
    return durable;
  }

  /** The current lease of `name`, ending it first when its deadline has passed. */
  private current(name: string, now: number): Lease | undefined {
    const lease = this.leases.get(name);
    if (lease === undefined || lease.deadline > now) return lease;
    // The timer has not fired yet (it is due in this very turn, or the clock was moved): the
    // lease is over all the same, and says so before anything else happens to the name.
    this.end(lease, 'expired');
    return undefined;
  }

  private takeToken(): bigint {
    const token = this.nextToken++;
    if (this.journal !== undefined && token > this.reservedEnd) {
      // The mark goes into the same batch as the grant that needs it, so no reply reports a
      // token from a block whose reservation is not on disk.
      this.reservedEnd += this.blockSize;
      this.journal.reserve(this.reservedEnd);
    }
    return token;
  }

  private refuse(): DlmError | undefined {
    if (this.closed) return new DlmError('UNAVAILABLE', 'the embedded backend is closed');
    return this.journal?.failure;
  }

  /** Resolves with `value` once `durable` (the batch holding the operation's records) is on disk. */
  private reply<T>(value: T, durable: Promise<void> | undefined): Promise<T> {
    return durable === undefined ? Promise.resolve(value) : durable.then(() => value);
  }

  tryAcquire({ name, owner, ttlMs, keyHash }: core.AcquireRequest): Promise<core.AcquireResult> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const ttl = leaseMs(ttlMs);
    if (ttl === undefined) return Promise.reject(invalidTtl());
    const now = this.clock.now();
    let lease = this.current(name, now);
    // The same owner without the lease's key is another requester (a copied owner label).
    if (lease !== undefined && (lease.owner !== owner || lease.keyHash !== keyHash)) {
      this.watchers.drain();
      return Promise.resolve({ granted: false, ttlRemainingMs: remainingMs(lease, now) });
    }
    if (lease === undefined) {
      lease = { name, owner, token: this.takeToken(), keyHash, deadline: now + ttl, heapIndex: -1 };
      this.leases.set(name, lease);
      this.heap.push(lease);
      if (this.watchers.has(name)) {
        this.watchers.enqueue({ name, type: 'acquired', token: lease.token, owner });
      }
    } else {
      // The same owner again (a re-sent acquire): same token, lease refreshed.
      lease.deadline = now + ttl;
      this.heap.update(lease);
    }
    this.armTimer();
    const durable = this.journal?.append({
      type: 'grant',
      name,
      owner,
      token: lease.token,
      ttlMs: ttl,
      wallMs: Date.now(),
      keyHash,
    });
    this.watchers.drain();
    const granted = lease;
    const result: core.AcquireResult = {
      granted: true,
      grant: { name, owner, token: granted.token, ttlMs: ttl },
    };
    if (durable === undefined) return Promise.resolve(result);
    return durable.then(() => {
      // Never report a grant that ran out (or changed hands) while its record was synced.
      if (this.leases.get(name) === granted && granted.deadline > this.clock.now()) return result;
      const holder = this.leases.get(name);
      return { granted: false, ttlRemainingMs: holder ? remainingMs(holder, this.clock.now()) : 0 };
    });
  }

  release({ name, token, keyHash }: core.HolderProof): Promise<boolean> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const lease = this.current(name, this.clock.now());
    if (lease === undefined || !holds(lease, token, keyHash)) {
      this.watchers.drain();
      return Promise.resolve(false);
    }
    const durable = this.end(lease, 'released');
    this.watchers.drain();
    return this.reply(true, durable);
  }

  extend({
    name,
    token,
    ttlMs,
    keyHash,
  }: core.HolderProof & { ttlMs: number }): Promise<core.Grant | null> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const ttl = leaseMs(ttlMs);
    if (ttl === undefined) return Promise.reject(invalidTtl());
    const now = this.clock.now();
    const lease = this.current(name, now);
    if (lease === undefined || !holds(lease, token, keyHash)) {
      this.watchers.drain();
      return Promise.resolve(null);
    }
    lease.deadline = now + ttl;
    this.heap.update(lease);
    this.armTimer();
    const durable = this.journal?.append({
      type: 'extend',
      name,
      token,
      ttlMs: ttl,
      wallMs: Date.now(),
    });
    const grant: core.Grant = { name, owner: lease.owner, token, ttlMs: ttl };
    if (durable === undefined) return Promise.resolve(grant);
    return durable.then(() =>
      this.leases.get(name) === lease && lease.deadline > this.clock.now() ? grant : null,
    );
  }

  inspect(name: string): Promise<core.LockState | null> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const now = this.clock.now();
    const lease = this.current(name, now);
    this.watchers.drain();
    if (lease === undefined) return Promise.resolve(null);
    return Promise.resolve(state(lease, now));
  }

  watch(name: string, listener: (event: core.LockEvent) => void): core.Unsubscribe {
    if (this.closed) return () => {};
    return this.watchers.watch(name, listener);
  }

  revoke(name: string): Promise<boolean> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const lease = this.current(name, this.clock.now());
    if (lease === undefined) {
      this.watchers.drain();
      return Promise.resolve(false);
    }
    const durable = this.end(lease, 'revoked');
    this.watchers.drain();
    return this.reply(true, durable);
  }

  list(prefix: string): Promise<core.LockState[]> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const now = this.clock.now();
    const found: core.LockState[] = [];
    // Expired leases the timer has not reached yet are skipped, not ended: ending them here
    // would mutate the map under iteration, and the timer is about to.
    for (const lease of this.leases.values()) {
      if (lease.deadline > now && lease.name.startsWith(prefix)) found.push(state(lease, now));
    }
    found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return Promise.resolve(found);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.watchers.clear();
    await this.journal?.close();
  }
}

/** The token, and the key's hash when one is presented (absent: an operator's token-only call). */
function holds(lease: Lease, token: bigint, keyHash: string | undefined): boolean {
  return lease.token === token && (keyHash === undefined || lease.keyHash === keyHash);
}

function state(lease: Lease, now: number): core.LockState {
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
