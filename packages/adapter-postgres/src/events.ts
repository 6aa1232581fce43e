import {
  type Clock,
  deliverEvent,
  getOrCreate,
  type HeardHolder,
  holderChangeEvents,
  type ListenerEntry,
  type LockEvent,
  LockListeners,
  type LockState,
  type Timer,
  type Unsubscribe,
} from '@dlm/core';
import type pg from 'pg';
import { ListenConnection } from './listen-connection.js';
import { type Message, parseMessage } from './notify-message.js';

/**
 * Lock events for every watched name over ONE dedicated `LISTEN` connection: the statements
 * that grant, release and revoke send a NOTIFY in the same statement (delivered at commit), and
 * expiries come from a timer at each known lease's end that asks the database (its clock) whether
 * the lease really ended before saying so. Nothing polls: the database is asked only at a
 * lease's end, after a reconnect, and by a heartbeat on the listening connection.
 */

export interface Known {
  token: bigint;
  owner: string;
  /** Absent: exclusive. */
  mode?: 'shared' | undefined;
}

/** A shared holder this server heard of, with the timer at its end. */
interface SharedHeld {
  owner: string;
  timer: Timer | undefined;
}

interface Entry extends ListenerEntry {
  /** The exclusive lease this server last heard of for the name. */
  known: Known | undefined;
  /** The shared holders this server heard of, by token. */
  shared: Map<bigint, SharedHeld>;
  timer: Timer | undefined;
  /** Bumped on every change of `known`, so a late check of an older lease changes nothing. */
  version: number;
}

export interface LockEventsOptions {
  pool: pg.Pool;
  channel: string;
  clock: Clock;
  timeoutMs: number;
  /** How often the listening connection is checked (a stalled server sends no error). */
  heartbeatMs: number;
  /** The current holder, for lease-end checks and resynchronisation. */
  inspect: (name: string) => Promise<LockState | null>;
  /** After the listening connection came back (events may have been missed meanwhile). */
  onResync?: () => void;
}

export interface LockEvents {
  watch(name: string, listener: (event: LockEvent) => void): Unsubscribe;
  /**
   * Calls `listener` with every entry that leaves `name`'s fair queue: its id, and the lease
   * it was granted (ms) when it left with the lock.
   */
  watchQueue(name: string, listener: (left: QueueDeparture) => void): Unsubscribe;
  /**
   * A change this server just committed (a release, an entry leaving the queue): its watchers
   * hear it now, not a round trip later from the database; its NOTIFY is then not delivered
   * again.
   */
  happened(change: Change): void;
  /** A lease this server granted or extended: its end is watched for when the name is. */
  noteLease(name: string, lease: Known, ttlMs: number): void;
  /** Learns the holder of a watched name whose grant was not seen here (a refused acquire). */
  learn(name: string): void;
  /** Resolves once the first `LISTEN` is in place. */
  readonly listening: Promise<void>;
  readonly isListening: boolean;
  /** Resolves once the first attempt to listen succeeded or failed. */
  readonly firstAttempt: Promise<void>;
  /** Why the last attempt to listen failed, until one succeeds. */
  readonly connectFailure: string | undefined;
  /** How many times the listening connection was (re)established. */
  readonly connects: number;
  /** The database's process id of the listening connection, while there is one. */
  readonly sessionPid: number | undefined;
  close(): Promise<void>;
}

export interface QueueDeparture {
  id: string;
  grantedMs: number | undefined;
}

/** What `happened` takes: a change as its NOTIFY would carry it. */
export type Change = Pick<Message, 't' | 'n' | 'k'> &
  Partial<Pick<Message, 'o' | 'ms' | 'm' | 'h'>>;

/** At most this many changes per name wait for their NOTIFY to be recognised and skipped. */
const MAX_HAPPENED = 32;

/** After a lease-end check that could not reach the database, ask again this much later. */
const RECHECK_MS = 1_000;

export function createLockEvents(options: LockEventsOptions): LockEvents {
  return new PostgresLockEvents(options);
}

class PostgresLockEvents implements LockEvents {
  private readonly entries = new LockListeners<Entry>({
    create: (name) => ({
      name,
      listeners: new Set(),
      known: undefined,
      shared: new Map(),
      timer: undefined,
      version: 0,
    }),
    dropped: (entry) => {
      cancelTimers(entry);
      if (!this.queues.has(entry.name)) this.delivered.delete(entry.name);
    },
  });
  /** Per name, the listeners of its fair queue's departures. */
  private readonly queues = new Map<string, Set<(left: QueueDeparture) => void>>();
  /** Per name, the changes delivered by `happened` whose NOTIFY has not arrived yet. */
  private readonly delivered = new Map<string, Set<string>>();
  private closed = false;
  private readonly connection: ListenConnection;
  private resolveListening: () => void = () => {};
  readonly listening = new Promise<void>((resolve) => {
    this.resolveListening = resolve;
  });

  constructor(private readonly options: LockEventsOptions) {
    const { pool, channel, clock, timeoutMs, heartbeatMs } = options;
    this.connection = new ListenConnection({
      pool,
      channel,
      clock,
      timeoutMs,
      heartbeatMs,
      onNotification: (payload) => {
        const message = parseMessage(payload);
        if (message) this.onNotification(message);
      },
      onListening: (connects) => this.onListening(connects),
    });
  }

  get isListening(): boolean {
    return this.connection.isListening;
  }

  get connects(): number {
    return this.connection.connects;
  }

  get firstAttempt(): Promise<void> {
    return this.connection.firstAttempt;
  }

  get connectFailure(): string | undefined {
    return this.connection.lastFailure;
  }

  get sessionPid(): number | undefined {
    return this.connection.sessionPid;
  }

  watch(name: string, listener: (event: LockEvent) => void): Unsubscribe {
    return this.entries.watch(name, listener);
  }

  watchQueue(name: string, listener: (left: QueueDeparture) => void): Unsubscribe {
    const set = getOrCreate(this.queues, name, () => new Set()).add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.queues.get(name) === set) {
        this.queues.delete(name);
        // Nobody hears of this name now: what was delivered early need not be remembered.
        if (!this.entries.get(name)) this.delivered.delete(name);
      }
    };
  }

  noteLease(name: string, lease: Known, ttlMs: number): void {
    const entry = this.entries.get(name);
    if (!entry) return;
    if (lease.mode === 'shared') {
      this.noteShared(entry, lease.token, lease.owner, ttlMs);
      return;
    }
    if (entry.known && lease.token < entry.known.token) return;
    this.setKnown(entry, lease, ttlMs);
  }

  learn(name: string): void {
    const entry = this.entries.get(name);
    if (!entry || entry.known || entry.shared.size > 0) return;
    const version = entry.version;
    this.options.inspect(name).then(
      (state) => {
        if (!state || entry.version !== version || !this.entries.isCurrent(entry)) return;
        if (state.mode === 'shared') {
          for (const held of state.holders ?? []) {
            this.noteShared(entry, held.token, held.owner, held.ttlRemainingMs);
          }
          return;
        }
        this.setKnown(entry, { token: state.token, owner: state.owner }, state.ttlRemainingMs);
      },
      () => {},
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    this.connection.close();
    for (const entry of this.entries.entries()) cancelTimers(entry);
    this.entries.clear();
    this.queues.clear();
    this.delivered.clear();
  }

  // ---- what watchers hear ------------------------------------------------------------------

  private setKnown(entry: Entry, known: Known | undefined, ttlMs: number): void {
    entry.known = known;
    entry.version += 1;
    entry.timer?.cancel();
    entry.timer = undefined;
    if (!known) return;
    const version = entry.version;
    // Our clock starts after the database's did (the reply or message came later), so this fires
    // at or after the lease's end on the database clock; the check then asks the database.
    entry.timer = this.options.clock.setTimer(() => void this.check(entry, version), ttlMs + 1);
  }

  /**
   * Reads `entry`'s holder for a decision about the lease known as of `version`: undefined when
   * the read failed (`onError` then ran) or the entry changed meanwhile (nothing to decide).
   */
  private async readHolder(
    entry: Entry,
    version: number,
    onError: () => void,
  ): Promise<{ state: LockState | null } | undefined> {
    let state: LockState | null;
    try {
      state = await this.options.inspect(entry.name);
    } catch {
      onError();
      return undefined;
    }
    if (entry.version !== version || !this.entries.isCurrent(entry)) return undefined;
    return { state };
  }

  /**
   * Makes what `entry`'s watchers know the holder the database reported, telling them of the
   * difference (`before` carries the owner when the news should).
   */
  private adopt(
    entry: Entry,
    before: HeardHolder | undefined,
    state: LockState | null,
    wakeWhenFree: boolean,
  ): void {
    const shared = state?.mode === 'shared' ? (state.holders ?? []) : [];
    const now =
      state && state.mode !== 'shared' ? { token: state.token, owner: state.owner } : undefined;
    this.setKnown(entry, now, now ? (state?.ttlRemainingMs ?? 0) : 0);
    const ended: LockEvent[] = [];
    const live = new Set(shared.map((held) => held.token));
    for (const [token, held] of [...entry.shared]) {
      if (live.has(token)) continue;
      forgetShared(entry, token, held);
      ended.push({ name: entry.name, type: 'expired', token, owner: held.owner });
    }
    const changes = holderChangeEvents(
      entry.name,
      before,
      now,
      wakeWhenFree && shared.length === 0 && ended.length === 0,
    );
    const events = [...changes.filter((event) => event.type !== 'acquired'), ...ended];
    events.push(...changes.filter((event) => event.type === 'acquired'));
    for (const held of shared) {
      if (entry.shared.has(held.token)) continue;
      this.noteShared(entry, held.token, held.owner, held.ttlRemainingMs);
      events.push({
        name: entry.name,
        type: 'acquired',
        token: held.token,
        owner: held.owner,
        mode: 'shared',
        holders: shared.length,
      });
    }
    for (const event of events) deliverEvent(entry.listeners, event);
  }

  /** A shared holder heard of: watched for its end (a timer, then the database's word). */
  private noteShared(entry: Entry, token: bigint, owner: string, ttlMs: number): void {
    const held = entry.shared.get(token) ?? { owner, timer: undefined };
    held.timer?.cancel();
    entry.shared.set(token, held);
    held.timer = this.options.clock.setTimer(
      () => void this.checkShared(entry, token, held),
      ttlMs + 1,
    );
  }

  /** At a shared holder's end: still held (extended) or gone (expired: say so)? */
  private async checkShared(entry: Entry, token: bigint, held: SharedHeld): Promise<void> {
    let state: LockState | null;
    try {
      state = await this.options.inspect(entry.name);
    } catch {
      if (entry.shared.get(token) === held && !this.closed) {
        held.timer = this.options.clock.setTimer(
          () => void this.checkShared(entry, token, held),
          RECHECK_MS,
        );
      }
      return;
    }
    if (entry.shared.get(token) !== held || !this.entries.isCurrent(entry)) return;
    const still =
      state?.mode === 'shared' ? state.holders?.find((h) => h.token === token) : undefined;
    if (still) {
      this.noteShared(entry, token, held.owner, still.ttlRemainingMs);
      return;
    }
    entry.shared.delete(token);
    deliverEvent(entry.listeners, {
      name: entry.name,
      type: 'expired',
      token,
      owner: held.owner,
    });
  }

  /** At a known lease's end: is it over on the database clock? Then say so. */
  private async check(entry: Entry, version: number): Promise<void> {
    const read = await this.readHolder(entry, version, () => {
      if (entry.version === version && !this.closed) {
        entry.timer = this.options.clock.setTimer(
          () => void this.check(entry, version),
          RECHECK_MS,
        );
      }
    });
    if (!read) return;
    const { state } = read;
    const known = entry.known;
    if (known && state && state.token === known.token) {
      // Extended (by another server, or a check that ran early): wait for the new end.
      this.setKnown(entry, known, state.ttlRemainingMs);
      return;
    }
    this.adopt(entry, known, state, false);
  }

  /**
   * After the stream was down, events may have been missed: compare what each watched name's
   * watchers last heard with what the database holds, and tell them the difference (or, when
   * that cannot be read, wake them so that waiters ask for themselves).
   */
  private async resynchronise(): Promise<void> {
    await Promise.all(
      [...this.entries.entries()].map(async (entry) => {
        const before = entry.known;
        const read = await this.readHolder(entry, entry.version, () =>
          deliverEvent(entry.listeners, { name: entry.name, type: 'released' }),
        );
        if (!read) return;
        // The expiry of a lease heard of before the gap says only its token.
        this.adopt(entry, before && { token: before.token }, read.state, true);
      }),
    );
  }

  happened(change: Change): void {
    const { n: name } = change;
    if (!this.entries.get(name) && !this.queues.get(name)) return;
    const seen = getOrCreate(this.delivered, name, () => new Set<string>());
    const key = `${change.t} ${change.k}`;
    if (seen.has(key)) return;
    seen.add(key);
    // Bounded: a NOTIFY lost with the LISTEN connection is never recognised.
    if (seen.size > MAX_HAPPENED) seen.delete(seen.values().next().value as string);
    this.onMessage({ ms: 0, o: '', ...change });
  }

  /** A NOTIFY: delivered unless `happened` delivered it already. */
  private onNotification(message: Message): void {
    const seen = this.delivered.get(message.n);
    if (seen?.delete(`${message.t} ${message.k}`)) {
      if (seen.size === 0) this.delivered.delete(message.n);
      return;
    }
    this.onMessage(message);
  }

  private onMessage(message: Message): void {
    if (message.t === 'left') {
      this.onDeparture(message);
      return;
    }
    const entry = this.entries.get(message.n);
    if (!entry) return;
    if (message.t === 'asked') {
      // A release request: no change of holder, nothing to track.
      const event: LockEvent = { name: message.n, type: 'releaseRequested' };
      if (typeof message.r === 'string') event.reason = message.r;
      deliverEvent(entry.listeners, event);
      return;
    }
    const token = BigInt(message.k);
    if (!this.track(entry, message, token)) return;
    const shared = message.m === 'shared';
    const event: LockEvent = { name: message.n, type: message.t, token, owner: message.o };
    if (shared && message.t === 'acquired') event.mode = 'shared';
    if (typeof message.h === 'number') event.holders = message.h;
    deliverEvent(entry.listeners, event);
  }

  /** A fair-queue entry left: its listeners hear its id, and its lease when it left with it. */
  private onDeparture(message: Message): void {
    const left: QueueDeparture = {
      id: message.k,
      grantedMs: message.o === 'granted' ? Number(message.ms) || 0 : undefined,
    };
    for (const listener of [...(this.queues.get(message.n) ?? [])]) listener(left);
  }

  /**
   * Updates what `entry` knows (and the timers at its leases' ends) from a change of holder;
   * false when the change is older than what is known (stale news: not delivered).
   */
  private track(entry: Entry, message: Message, token: bigint): boolean {
    const known = entry.known;
    if (message.t === 'acquired' && message.m === 'shared') {
      this.noteShared(entry, token, message.o, Number(message.ms) || 0);
      // A shared grant after an exclusive lease: that lease is over.
      if (known && known.token < token) this.setKnown(entry, undefined, 0);
    } else if (message.t === 'acquired') {
      // Messages arrive in commit order, but a reply may have told us of a newer grant first.
      if (known && token < known.token) return false;
      this.setKnown(entry, { token, owner: message.o }, Number(message.ms) || 0);
      forgetAllShared(entry);
    } else {
      const held = entry.shared.get(token);
      if (held) forgetShared(entry, token, held);
      else if (known && known.token === token) this.setKnown(entry, undefined, 0);
    }
    return true;
  }

  // ---- the listening connection --------------------------------------------------------------

  private onListening(connects: number): void {
    if (connects === 1) this.resolveListening();
    else {
      // What was delivered early and not heard of since is not going to be heard of.
      this.delivered.clear();
      // First: what it does (a follower registered anew) may be what the resync's reads wait for.
      this.options.onResync?.();
      void this.resynchronise();
    }
  }
}

/** Stops watching for the end of a shared holder's lease and forgets it. */
function forgetShared(entry: Entry, token: bigint, held: SharedHeld): void {
  held.timer?.cancel();
  entry.shared.delete(token);
}

/** Forgets every shared holder of `entry` (an exclusive lease was granted, or nobody watches). */
function forgetAllShared(entry: Entry): void {
  for (const held of entry.shared.values()) held.timer?.cancel();
  entry.shared.clear();
}

/** Cancels every timer at the end of a lease `entry` knows of (forgetting its shared holders). */
function cancelTimers(entry: Entry): void {
  entry.timer?.cancel();
  forgetAllShared(entry);
}
