import type { Clock } from '@dlm/core';

/** What the history keeps of a change: how leases began and ended, and acquires that queued. */
export type HistoryEventType = 'acquired' | 'released' | 'expired' | 'revoked' | 'queued';

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
  const { clock } = options;
  const maxEvents = options.maxEvents ?? HISTORY_MAX_EVENTS;
  const maxAgeMs = options.maxAgeMs ?? HISTORY_MAX_AGE_MS;
  const seconds = options.rateSeconds ?? RATE_SECONDS;
  // A circular buffer: `start` is the oldest event, `length` how many there are.
  const ring: (HistoryEvent | undefined)[] = new Array(maxEvents);
  let start = 0;
  let length = 0;
  let seq = 0;
  // Slot `second % seconds` counts that second's events of each kind, if `stamps` says it is it.
  const counts = KINDS.map(() => new Float64Array(seconds));
  const stamps = new Float64Array(seconds).fill(-1);
  const joined = new Map<string, number[]>();

  function at(index: number): HistoryEvent {
    return ring[(start + index) % maxEvents]!;
  }

  function dropOld(now: number): void {
    while (length > 0 && now - at(0).at > maxAgeMs) {
      ring[start] = undefined;
      start = (start + 1) % maxEvents;
      length -= 1;
    }
  }

  function push(event: HistoryEvent): void {
    dropOld(event.at);
    if (length === maxEvents) {
      start = (start + 1) % maxEvents;
      length -= 1;
    }
    ring[(start + length) % maxEvents] = event;
    length += 1;
    const kind = kindOf(event.type);
    if (kind === undefined) return;
    const second = Math.floor(event.at / 1000);
    const slot = second % seconds;
    if (stamps[slot] !== second) {
      stamps[slot] = second;
      for (const series of counts) series[slot] = 0;
    }
    counts[KINDS.indexOf(kind)]![slot]! += 1;
  }

  function since(afterSeq: number, prefix: string): HistoryEvent[] {
    dropOld(clock.now());
    const from = afterSeq > seq ? 0 : afterSeq;
    const events: HistoryEvent[] = [];
    for (let i = 0; i < length; i += 1) {
      const event = at(i);
      if (event.seq > from && event.name.startsWith(prefix)) events.push(event);
    }
    return events;
  }

  function emptyRates(): Rates {
    return {
      grants: new Array<number>(seconds).fill(0),
      releases: new Array<number>(seconds).fill(0),
      expiries: new Array<number>(seconds).fill(0),
      waits: new Array<number>(seconds).fill(0),
    };
  }

  return {
    record(event) {
      seq += 1;
      // Every event has the same shape (absent fields undefined): a third of the memory of
      // objects of varying shapes.
      push({
        seq,
        at: clock.now(),
        type: event.type,
        name: event.name,
        owner: event.owner,
        token: event.token,
        waitedMs: event.waitedMs,
        heldMs: event.heldMs,
      });
    },

    queued(name, count) {
      const times = joined.get(name) ?? [];
      // A grant goes to the head of the queue; a waiter that gives up may be anywhere in it,
      // but the observer reports only the length, so the oldest are counted off first.
      while (times.length > count) times.shift();
      const now = clock.now();
      while (times.length < count) {
        times.push(now);
        seq += 1;
        push({
          seq,
          at: now,
          type: 'queued',
          name,
          owner: undefined,
          token: undefined,
          waitedMs: undefined,
          heldMs: undefined,
        });
      }
      if (times.length === 0) joined.delete(name);
      else joined.set(name, times);
    },

    since,

    rates(prefix) {
      const now = Math.floor(clock.now() / 1000);
      const rates = emptyRates();
      const first = now - seconds + 1;
      if (prefix === '') {
        for (let second = first; second <= now; second += 1) {
          const slot = second % seconds;
          if (stamps[slot] !== second) continue;
          KINDS.forEach((kind, k) => {
            rates[kind][second - first] = counts[k]![slot]!;
          });
        }
        return rates;
      }
      // A filtered view counts only what the ring still holds under the prefix.
      for (const event of since(0, prefix)) {
        const kind = kindOf(event.type);
        const second = Math.floor(event.at / 1000);
        if (kind !== undefined && second >= first) rates[kind][second - first]! += 1;
      }
      return rates;
    },

    waitingMs(name) {
      const now = clock.now();
      return (joined.get(name) ?? []).map((time) => Math.max(0, Math.round(now - time)));
    },

    ageMs(at) {
      return Math.max(0, Math.round(clock.now() - at));
    },

    waitingNames() {
      return joined.keys();
    },

    get seq() {
      return seq;
    },

    get size() {
      dropOld(clock.now());
      return length;
    },

    clear() {
      ring.fill(undefined);
      start = 0;
      length = 0;
      joined.clear();
    },
  };
}
