import type * as core from '@dlm/core';
import { DlmError, decideGrant, MAX_TIMER_MS, type RuleHolders, systemClock } from '@dlm/core';
import { createDeadlineHeap } from './deadline-heap.js';
import { type Journal, openJournal, type RecoveredLease } from './journal.js';
import type { JournalRecord } from './journal-format.js';
import { type Held, type Lease, SharedHolders } from './lease.js';
import { LockDelays } from './lock-delays.js';
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
    sharedModes: true,
    lockDelay: true,
    maxHold: true,
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
    requestRelease: (name, reason) => store.requestRelease(name, reason),
    lockDelayOf: (name) => store.lockDelayOf(name),
    list: (prefix) => store.list(prefix),
    close: () => store.close(),
  };
}

/** The locks of one embedded backend: a map, a deadline heap, watchers and (maybe) a journal. */
class EmbeddedStore {
  /** Per held name: its one exclusive lease itself, or its shared holders. */
  private readonly leases = new Map<string, Held>();
  private readonly heap = createDeadlineHeap();
  /** Lock-delays: after an expiry or revocation, nobody is granted the name for a while. */
  private readonly delays = new LockDelays();
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
    // The monotonic clock restarted with the process, so a lease is counted in full from now:
    // its holder may still believe in it for that long. Only a wall clock showing the whole TTL
    // gone since the record drops it early.
    // A cap on holding is kept on the wall clock: the lease ends by it even when its own time
    // (counted in full from now) would run longer.
    const revive = (held: RecoveredLease): Lease | undefined => {
      const capMs =
        held.capWallMs === undefined ? Number.POSITIVE_INFINITY : held.capWallMs - wallNow;
      if (wallNow - held.wallMs >= held.ttlMs || capMs <= 0) return undefined;
      const lease: Lease = {
        name: held.name,
        owner: held.owner,
        token: held.token,
        keyHash: held.keyHash,
        deadline: now + Math.min(held.ttlMs, capMs),
        heapIndex: -1,
      };
      if (held.capWallMs !== undefined) lease.capAt = now + capMs;
      return lease;
    };
    for (const [name, held] of recovered) {
      if (!(held instanceof Map)) {
        const lease = revive(held);
        if (lease === undefined) continue;
        this.leases.set(name, lease);
        this.heap.push(lease);
        continue;
      }
      const holders: Lease[] = [];
      let limit = 1;
      for (const one of held.values()) {
        limit = one.limit ?? limit;
        const lease = revive(one);
        if (lease !== undefined) holders.push(lease);
      }
      if (holders.length === 0) continue;
      holders.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
      this.leases.set(name, new SharedHolders(limit, holders));
      for (const lease of holders) this.heap.push(lease);
    }
    // The journal's own copy is not read again, and it would stay as long as the journal: a
    // record and a map entry more for every recovered lease.
    recovered.clear();
    this.delays.recover(journal.recovered.delays, now);
    this.armTimer();
  }

  snapshot(): JournalRecord[] {
    const now = this.clock.now();
    const wallMs = Date.now();
    const records: JournalRecord[] = [{ type: 'high-water', token: this.reservedEnd }];
    const add = (lease: Lease, limit: number | undefined) => {
      const ttlMs = Math.ceil(lease.deadline - now);
      if (ttlMs <= 0) return;
      records.push({
        type: 'grant',
        name: lease.name,
        owner: lease.owner,
        token: lease.token,
        ttlMs,
        wallMs,
        keyHash: lease.keyHash,
        limit,
      });
      const cap = capRecord(lease, now, wallMs);
      if (cap !== undefined) records.push(cap);
    };
    for (const held of this.leases.values()) {
      if (held instanceof SharedHolders) for (const lease of held.holders) add(lease, held.limit);
      else add(held, undefined);
    }
    records.push(...this.delays.snapshot(now));
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
    this.expireDue(this.clock.now());
    this.watchers.drain();
    this.armTimer();
  }

  /**
   * Ends every lease whose deadline has passed. The timer does this too, but it may not have
   * fired yet (it is due in this very turn, or the clock was moved): a lease that is over says
   * so before anything else happens to its name. One comparison when nothing is due.
   */
  private expireDue(now: number): void {
    for (
      let first = this.heap.peek();
      first !== undefined && first.deadline <= now;
      first = this.heap.peek()
    ) {
      this.end(first, 'expired');
    }
  }

  /** Ends one holder: state first, then the journal record and the event. */
  private end(lease: Lease, type: core.LockEvent['type']): Promise<void> | undefined {
    const held = this.leases.get(lease.name);
    let mode: core.LockMode = 'exclusive';
    let holders = 0;
    if (held instanceof SharedHolders) {
      mode = 'shared';
      held.remove(lease.token);
      holders = held.size;
      if (holders === 0) this.leases.delete(lease.name);
    } else if (held === lease) {
      this.leases.delete(lease.name);
    }
    this.heap.remove(lease);
    let durable = this.journal?.append({
      type: 'end',
      name: lease.name,
      token: lease.token,
    });
    if (type === 'released' || type === 'revoked') {
      const delay = this.delays.ended(lease.name, lease.token, type, this.clock.now());
      if (delay !== undefined) durable = this.journal?.append(delay) ?? durable;
    }
    if (this.watchers.has(lease.name)) {
      this.watchers.enqueue({
        name: lease.name,
        type,
        token: lease.token,
        owner: lease.owner,
        mode,
        holders,
      });
    }
    return durable;
  }

  /** The holder of `name` with `token`, if it holds. */
  private holder(name: string, token: bigint): Lease | undefined {
    const held = this.leases.get(name);
    if (held === undefined) return undefined;
    if (!(held instanceof SharedHolders)) return held.token === token ? held : undefined;
    return held.get(token);
  }

  /** A lease that runs on: its new deadline, and its place in the deadline heap. */
  private restart(lease: Lease, deadline: number): void {
    lease.deadline = deadline;
    this.heap.update(lease);
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

  /**
   * Delivers what the operation caused (expiries), then answers without a write of its own,
   * once what it read is on disk: a read or a refusal never reports a state that a crash could
   * take back (a release whose record is not synced yet would come back after a restart).
   */
  private answer<T>(value: T): Promise<T> {
    this.watchers.drain();
    const synced = this.journal?.synced();
    return synced === undefined ? Promise.resolve(value) : synced.then(() => value, readFailed);
  }

  tryAcquire(request: core.AcquireRequest): Promise<core.AcquireResult> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const { name, owner, keyHash } = request;
    const ttl = leaseMs(request.ttlMs);
    if (ttl === undefined) return Promise.reject(invalidTtl());
    const mode = request.mode;
    const shared = mode === 'shared';
    if (!shared && mode !== undefined && mode !== 'exclusive') return Promise.reject(invalidMode());
    const limit = shared ? request.limit : undefined;
    if (shared && (!Number.isSafeInteger(limit) || limit! < 1)) {
      return Promise.reject(invalidLimit());
    }
    const now = this.clock.now();
    this.expireDue(now);
    const held = this.leases.get(name);
    // The holder this request refreshes (the same owner with the same key): core's rule decides.
    let lease = held === undefined ? undefined : ownHolder(held, owner, keyHash);
    const delayMs = held === undefined ? this.delays.remainingMs(name, now) : 0;
    const decision = decideGrant(
      { mode: shared ? 'shared' : 'exclusive', limit: limit ?? 1 },
      held === undefined ? { count: 0, lockDelayRemainingMs: delayMs } : ruleHolders(held, lease),
    );
    if (decision.kind === 'conflict') {
      return this.answer({ granted: false, conflict: decision.conflict } as core.AcquireResult);
    }
    if (decision.kind === 'wait' && decision.on === 'delay') {
      return this.answer({
        granted: false,
        ttlRemainingMs: delayMs,
        lockDelayRemainingMs: delayMs,
      });
    }
    if (decision.kind === 'wait') {
      // Never behind an entry: this backend has no queue (core's FIFO holds the waits).
      const end = decision.on === 'holder' ? decision.end : 'latest';
      return this.answer(notGranted(waitMs(held!, end, now)));
    }
    if (decision.kind === 'grant') lease = undefined;
    if (lease === undefined) {
      lease = { name, owner, token: this.takeToken(), keyHash, deadline: now + ttl, heapIndex: -1 };
      if (request.maxHoldMs !== undefined) lease.capAt = now + request.maxHoldMs;
      let holders = 1;
      if (!shared) this.leases.set(name, lease);
      else if (held instanceof SharedHolders) holders = held.add(lease);
      else this.leases.set(name, new SharedHolders(limit!, [lease]));
      this.heap.push(lease);
      if (this.watchers.has(name)) {
        this.watchers.enqueue({
          name,
          type: 'acquired',
          token: lease.token,
          owner,
          mode: shared ? 'shared' : 'exclusive',
          holders,
        });
      }
    } else {
      // The same owner again (a re-sent acquire): same token, lease refreshed (to its cap).
      this.restart(lease, now + capped(lease, ttl, now));
    }
    this.armTimer();
    const grantedMs = capped(lease, ttl, now);
    const wallMs = Date.now();
    let durable = this.journal?.append({
      type: 'grant',
      name,
      owner,
      token: lease.token,
      ttlMs: grantedMs,
      wallMs,
      keyHash,
      limit,
    });
    const cap = capRecord(lease, now, wallMs);
    if (cap !== undefined) durable = this.journal?.append(cap) ?? durable;
    if (!shared) {
      const delay = this.delays.granted(
        name,
        lease.token,
        request.lockDelayMs ?? 0,
        now + grantedMs,
        now,
      );
      if (delay !== undefined) durable = this.journal?.append(delay) ?? durable;
    }
    this.watchers.drain();
    const granted = lease;
    const result: core.AcquireResult = {
      granted: true,
      grant: { name, owner, token: granted.token, ttlMs: grantedMs, ...holdLeft(granted, now) },
    };
    if (durable === undefined) return Promise.resolve(result);
    return durable.then(() => {
      // Never report a grant that ran out (or ended) while its record was synced. A lease
      // leaves the heap when it ends, and never returns to it.
      const at = this.clock.now();
      if (granted.heapIndex >= 0 && granted.deadline > at) return result;
      const holder = this.leases.get(name);
      return notGranted(
        holder === undefined ? 0 : waitMs(holder, shared ? 'soonest' : 'latest', at),
      );
    });
  }

  release({ name, token, keyHash }: core.HolderProof): Promise<boolean> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    this.expireDue(this.clock.now());
    const lease = this.holder(name, token);
    if (lease === undefined || !holds(lease, token, keyHash)) return this.answer(false);
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
    this.expireDue(now);
    const lease = this.holder(name, token);
    if (lease === undefined || !holds(lease, token, keyHash)) return this.answer(null);
    // Up to the cap on holding only; at it, the lease is over (its deadline was the cap).
    const grantedMs = capped(lease, ttl, now);
    if (grantedMs <= 0) return this.answer(null);
    this.restart(lease, now + grantedMs);
    this.armTimer();
    let durable = this.journal?.append({
      type: 'extend',
      name,
      token,
      ttlMs: grantedMs,
      wallMs: Date.now(),
    });
    const delay = this.delays.extended(name, token, now + grantedMs, now);
    if (delay !== undefined) durable = this.journal?.append(delay) ?? durable;
    this.watchers.drain();
    const grant: core.Grant = {
      name,
      owner: lease.owner,
      token,
      ttlMs: grantedMs,
      ...holdLeft(lease, now),
    };
    if (durable === undefined) return Promise.resolve(grant);
    return durable.then(() =>
      lease.heapIndex >= 0 && lease.deadline > this.clock.now() ? grant : null,
    );
  }

  inspect(name: string): Promise<core.LockState | null> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const now = this.clock.now();
    this.expireDue(now);
    const held = this.leases.get(name);
    return this.answer(held === undefined ? null : state(held, now));
  }

  lockDelayOf(name: string): Promise<number> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const now = this.clock.now();
    this.expireDue(now);
    return this.answer(this.leases.has(name) ? 0 : this.delays.remainingMs(name, now));
  }

  watch(name: string, listener: (event: core.LockEvent) => void): core.Unsubscribe {
    if (this.closed) return () => {};
    return this.watchers.watch(name, listener);
  }

  /** Every watch of the name in this process hears it: every service over this store. */
  requestRelease(name: string, reason: string | undefined): Promise<void> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const event: core.LockEvent = { name, type: 'releaseRequested' };
    if (reason !== undefined) event.reason = reason;
    this.watchers.enqueue(event);
    this.watchers.drain();
    return Promise.resolve();
  }

  revoke(name: string): Promise<boolean> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    this.expireDue(this.clock.now());
    const held = this.leases.get(name);
    if (held === undefined) return this.answer(false);
    let durable: Promise<void> | undefined;
    if (held instanceof SharedHolders) {
      // A copy: ending a holder takes it out of the array.
      for (const lease of [...held.holders]) durable = this.end(lease, 'revoked');
    } else {
      durable = this.end(held, 'revoked');
    }
    this.watchers.drain();
    return this.reply(true, durable);
  }

  list(prefix: string): Promise<core.LockState[]> {
    const refused = this.refuse();
    if (refused !== undefined) return Promise.reject(refused);
    const now = this.clock.now();
    // Expired leases end first, so the map is not changed under the iteration below.
    this.expireDue(now);
    const found: core.LockState[] = [];
    for (const [name, held] of this.leases) {
      if (name.startsWith(prefix)) found.push(state(held, now));
    }
    found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return this.answer(found);
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

/** The holder of `held` with this owner and key hash (another key is another requester). */
function ownHolder(held: Held, owner: string, keyHash: string | undefined): Lease | undefined {
  if (held instanceof SharedHolders) return held.find(owner, keyHash);
  return held.owner === owner && held.keyHash === keyHash ? held : undefined;
}

/** The holders as core's grant rule reads them. */
function ruleHolders(held: Held, own: Lease | undefined): RuleHolders {
  if (!(held instanceof SharedHolders)) {
    return { count: 1, mode: 'exclusive', own: own && { mode: 'exclusive', limit: 1 } };
  }
  const { limit } = held;
  return { count: held.size, mode: 'shared', limit, own: own && { mode: 'shared', limit } };
}

function notGranted(ttlRemainingMs: number): core.AcquireResult {
  return { granted: false, ttlRemainingMs };
}

/**
 * How long until the holder whose end would let a request in ends (the rule's `end`): a shared
 * request at the limit waits for the soonest, any other for the latest.
 */
function waitMs(held: Held, end: 'latest' | 'soonest', now: number): number {
  if (!(held instanceof SharedHolders)) return remainingMs(held, now);
  const soonest = end === 'soonest';
  let deadline = soonest ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY;
  for (const lease of held.holders) {
    deadline = soonest ? Math.min(deadline, lease.deadline) : Math.max(deadline, lease.deadline);
  }
  return Math.ceil(deadline - now);
}

/** The token, and the key's hash when one is presented (absent: an operator's token-only call). */
function holds(lease: Lease, token: bigint, keyHash: string | undefined): boolean {
  return lease.token === token && (keyHash === undefined || lease.keyHash === keyHash);
}

/** Who holds a name: the highest token's holder on top, and every holder by token. */
function state(held: Held, now: number): core.LockState {
  if (!(held instanceof SharedHolders)) {
    const ttlRemainingMs = remainingMs(held, now);
    return {
      name: held.name,
      owner: held.owner,
      token: held.token,
      ttlRemainingMs,
      mode: 'exclusive',
      holders: [{ owner: held.owner, token: held.token, ttlRemainingMs }],
    };
  }
  const top = held.holders[held.holders.length - 1]!;
  return {
    name: top.name,
    owner: top.owner,
    token: top.token,
    ttlRemainingMs: remainingMs(top, now),
    mode: 'shared',
    limit: held.limit,
    holders: held.holders.map((lease) => ({
      owner: lease.owner,
      token: lease.token,
      ttlRemainingMs: remainingMs(lease, now),
    })),
  };
}

/** Whole milliseconds, rounded up: a held lease never reports 0 remaining. */
function remainingMs(lease: Lease, now: number): number {
  return Math.ceil(lease.deadline - now);
}

/** The lease actually granted: at least 1 ms, whole milliseconds; undefined when not a number. */
/** `ttlMs`, but no further than the lease's cap on holding (0 or less: at or past it). */
function capped(lease: Lease, ttlMs: number, now: number): number {
  return lease.capAt === undefined ? ttlMs : Math.min(ttlMs, Math.floor(lease.capAt - now));
}

/** A capped lease's `holdRemainingMs` for its grant. */
function holdLeft(lease: Lease, now: number): { holdRemainingMs?: number } {
  return lease.capAt === undefined ? {} : { holdRemainingMs: Math.floor(lease.capAt - now) };
}

/** The journal record of a lease's cap on holding, on the wall clock; none for an uncapped one. */
function capRecord(lease: Lease, now: number, wallMs: number): JournalRecord | undefined {
  if (lease.capAt === undefined) return undefined;
  const capWallMs = Math.floor(wallMs + lease.capAt - now);
  return { type: 'cap', name: lease.name, token: lease.token, capWallMs };
}

function leaseMs(ttlMs: number): number | undefined {
  if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs)) return undefined;
  return Math.max(1, Math.ceil(ttlMs));
}

function invalidMode(): DlmError {
  return new DlmError('INVALID_PARAMS', 'mode must be "exclusive" or "shared"', { field: 'mode' });
}

function invalidLimit(): DlmError {
  return new DlmError('INVALID_PARAMS', "a shared lock's limit must be a positive integer", {
    field: 'limit',
  });
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

/**
 * A read whose state did not reach the disk in time: UNAVAILABLE, as a write would be, but not
 * indeterminate (a read changes nothing).
 */
function readFailed(error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  throw new DlmError('UNAVAILABLE', message);
}
