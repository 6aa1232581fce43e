import type { Clock } from '@dlm/core';

/**
 * What the history keeps of a change: how leases began and ended, acquires that queued, and
 * release requests made through this server (`releaseRequested`: not a change of holder).
 */
export type HistoryEventType =
  | 'acquired'
  | 'released'
  | 'expired'
  | 'revoked'
  | 'queued'
  | 'releaseRequested';

export interface HistoryEvent {
  /** Increases by one per event, from 1; a reader asks for the events after the last it saw. */
  seq: number;
  /** On the feed's clock. */
  at: number;
  type: HistoryEventType;
  name: string;
  owner: string | undefined;
  token: bigint | undefined;
  /** A grant through this server: how long its acquire queued first. */
  waitedMs: number | undefined;
  /** The end of a lease granted through this server: how long it was held. */
  heldMs: number | undefined;
}

/** What `record` is given: an event without its seq and time, and only the fields it has. */
export interface NewHistoryEvent {
  type: HistoryEventType;
  name: string;
  owner?: string;
  token?: bigint;
  waitedMs?: number;
  heldMs?: number;
}

/** Per-second counts, oldest second first; the last entry is the second under way. */
export interface Rates {
  grants: number[];
  releases: number[];
  expiries: number[];
  waits: number[];
}

export interface FeedHistoryOptions {
  clock: Clock;
  /** The ring's size bound (default {@link HISTORY_MAX_EVENTS}). */
  maxEvents?: number;
  /** The ring's time bound: older events are dropped (default {@link HISTORY_MAX_AGE_MS}). */
  maxAgeMs?: number;
  /** How many seconds the rates cover (default {@link RATE_SECONDS}). */
  rateSeconds?: number;
}

export const HISTORY_MAX_EVENTS = 10_000;
export const HISTORY_MAX_AGE_MS = 5 * 60_000;
export const RATE_SECONDS = 300;

/**
 * The recent past of the lock feed, for a dashboard that opens (or reloads) after it: a ring of
 * the last events, bounded by count and by age, and per-second counts of grants, releases,
 * expiries and queued acquires over the last minutes, kept in fixed arrays so that a busy
 * server's rates cost no more memory than an idle one's. It also follows, per name, when each
 * acquire still queued here joined the queue.
 */
export interface FeedHistory {
  record(event: NewHistoryEvent): void;
  /** The number of acquires queued here for `name` is now `count` (the observer's report). */
  queued(name: string, count: number): void;
  /** Events after `afterSeq` under `prefix`, oldest first; all of them if `afterSeq` is ahead. */
  since(afterSeq: number, prefix: string): HistoryEvent[];
  /** Per-second counts for every name (`''`), or counted from the ring's events under `prefix`. */
  rates(prefix: string): Rates;
  /** How long each acquire queued here for `name` has waited, longest first (ms). */
  waitingMs(name: string): number[];
  /** How long ago `at` (an event's time) was, in whole ms. */
  ageMs(at: number): number;
  /** Names with acquires queued here. */
  waitingNames(): IterableIterator<string>;
  /** The last event's `seq` (0 before any). */
  readonly seq: number;
  /** Events in the ring now. */
  readonly size: number;
  clear(): void;
}

const KINDS = ['grants', 'releases', 'expiries', 'waits'] as const;
type Kind = (typeof KINDS)[number];

function kindOf(type: HistoryEventType): Kind | undefined {
  switch (type) {
    case 'acquired':
      return 'grants';
    case 'released':
      return 'releases';
    case 'expired':
      return 'expiries';
    case 'queued':
      return 'waits';
    default:
      return undefined;
  }
}

export function createFeedHistory(options: FeedHistoryOptions): FeedHistory {
  return new History(options);
}

/** Per-second counts of each kind over the last `seconds`, in fixed arrays. */
class RateCounter {
  // Slot `second % seconds` counts that second's events of each kind, if `stamps` says it is it.
  private readonly counts: Float64Array[];
  private readonly stamps: Float64Array;

  constructor(private readonly seconds: number) {
    this.counts = KINDS.map(() => new Float64Array(seconds));
    this.stamps = new Float64Array(seconds).fill(-1);
  }

  count(kind: Kind, at: number): void {
    const second = Math.floor(at / 1000);
    const slot = second % this.seconds;
    if (this.stamps[slot] !== second) {
      this.stamps[slot] = second;
      for (const series of this.counts) series[slot] = 0;
    }
    this.counts[KINDS.indexOf(kind)]![slot]! += 1;
  }

  /** The counts up to the second of `now`; `events`, if given, are counted instead. */
  read(now: number, events?: readonly HistoryEvent[]): Rates {
    const last = Math.floor(now / 1000);
    const first = last - this.seconds + 1;
    const rates = {} as Rates;
    for (const kind of KINDS) rates[kind] = new Array<number>(this.seconds).fill(0);
    if (events) {
      for (const event of events) {
        const kind = kindOf(event.type);
        const second = Math.floor(event.at / 1000);
        if (kind !== undefined && second >= first) rates[kind][second - first]! += 1;
      }
      return rates;
    }
    for (let second = first; second <= last; second += 1) {
      const slot = second % this.seconds;
      if (this.stamps[slot] !== second) continue;
      KINDS.forEach((kind, k) => {
        rates[kind][second - first] = this.counts[k]![slot]!;
      });
    }
    return rates;
  }
}

class History implements FeedHistory {
  private readonly clock: Clock;
  private readonly maxEvents: number;
  private readonly maxAgeMs: number;
  // A circular buffer: `start` is the oldest event, `length` how many there are.
  private readonly ring: (HistoryEvent | undefined)[];
  private start = 0;
  private length = 0;
  private lastSeq = 0;
  private readonly counter: RateCounter;
  /** Per name with acquires queued here, when each joined, oldest first. */
  private readonly joined = new Map<string, number[]>();

  constructor(options: FeedHistoryOptions) {
    this.clock = options.clock;
    this.maxEvents = options.maxEvents ?? HISTORY_MAX_EVENTS;
    this.maxAgeMs = options.maxAgeMs ?? HISTORY_MAX_AGE_MS;
    this.ring = new Array(this.maxEvents);
    this.counter = new RateCounter(options.rateSeconds ?? RATE_SECONDS);
  }

  get seq(): number {
    return this.lastSeq;
  }

  get size(): number {
    this.dropOld(this.clock.now());
    return this.length;
  }

  record(event: NewHistoryEvent): void {
    // Every event has the same shape (absent fields undefined): a third of the memory of
    // objects of varying shapes.
    this.push({
      seq: 0,
      at: this.clock.now(),
      type: event.type,
      name: event.name,
      owner: event.owner,
      token: event.token,
      waitedMs: event.waitedMs,
      heldMs: event.heldMs,
    });
  }

  queued(name: string, count: number): void {
    const times = this.joined.get(name) ?? [];
    // A grant goes to the head of the queue; a waiter that gives up may be anywhere in it,
    // but the observer reports only the length, so the oldest are counted off first.
    while (times.length > count) times.shift();
    const at = this.clock.now();
    while (times.length < count) {
      times.push(at);
      const none = { owner: undefined, token: undefined, waitedMs: undefined, heldMs: undefined };
      this.push({ seq: 0, at, type: 'queued', name, ...none });
    }
    if (times.length === 0) this.joined.delete(name);
    else this.joined.set(name, times);
  }

  since(afterSeq: number, prefix: string): HistoryEvent[] {
    this.dropOld(this.clock.now());
    const from = afterSeq > this.lastSeq ? 0 : afterSeq;
    const events: HistoryEvent[] = [];
    for (let i = 0; i < this.length; i += 1) {
      const event = this.at(i);
      if (event.seq > from && event.name.startsWith(prefix)) events.push(event);
    }
    return events;
  }

  rates(prefix: string): Rates {
    const now = this.clock.now();
    // A filtered view counts only what the ring still holds under the prefix.
    return this.counter.read(now, prefix === '' ? undefined : this.since(0, prefix));
  }

  waitingMs(name: string): number[] {
    return (this.joined.get(name) ?? []).map((at) => this.ageMs(at));
  }

  ageMs(at: number): number {
    return Math.max(0, Math.round(this.clock.now() - at));
  }

  waitingNames(): IterableIterator<string> {
    return this.joined.keys();
  }

  clear(): void {
    this.ring.fill(undefined);
    this.start = 0;
    this.length = 0;
    this.joined.clear();
  }

  private at(index: number): HistoryEvent {
    return this.ring[(this.start + index) % this.maxEvents]!;
  }

  private dropOld(now: number): void {
    while (this.length > 0 && now - this.at(0).at > this.maxAgeMs) {
      this.ring[this.start] = undefined;
      this.start = (this.start + 1) % this.maxEvents;
      this.length -= 1;
    }
  }

  /** Adds `event` with the next seq, making room by age, then by count. */
  private push(event: HistoryEvent): void {
    this.lastSeq += 1;
    event.seq = this.lastSeq;
    this.dropOld(event.at);
    if (this.length === this.maxEvents) {
      this.start = (this.start + 1) % this.maxEvents;
      this.length -= 1;
    }
    this.ring[(this.start + this.length) % this.maxEvents] = event;
    this.length += 1;
    const kind = kindOf(event.type);
    if (kind !== undefined) this.counter.count(kind, event.at);
  }
}
