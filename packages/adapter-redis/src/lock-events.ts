import {
  type Clock,
  deliverEvent,
  getOrCreate,
  type ListenerEntry,
  type LockEvent,
  LockListeners,
  type Unsubscribe,
} from '@dlm/core';
import type { Redis } from 'ioredis';
import { within } from './command-bounds.js';
import { createEventChannels, type EventChannels } from './event-channels.js';
import {
  encodeName,
  holderKeyspacePattern,
  holderOfMarkKey,
  keyspaceChannelPrefix,
  keyspacePattern,
  nameOfLockKey,
} from './key-encoding.js';

/**
 * Lock events for every watched name over ONE subscriber connection per Redis node: the
 * scripts publish `acquired`/`released`/`revoked` on the name's own channel (`nameChannel`; the
 * name is in the message too; `shared <hex> <token> <holders> <owner>` for a shared grant,
 * `expired …` for a shared holder a script found past its deadline), which the connection
 * subscribes to while the name is watched here (event-channels.ts), and expiries come from
 * keyspace notifications on two patterns (exclusive lock keys, shared holders' marker keys).
 * Watching a name is a Map entry and a channel, so thousands of watched names cost no extra
 * connections, and a service hears no other name's events.
 */

export type EventMode =
  /**
   * One Redis: tokens are strict, so an `acquired` with a lower token than one already seen
   * is stale news and dropped, and an expiry (which Redis reports without the value) is
   * labelled with the token of the last grant seen on the same, server-ordered stream.
   */
  | 'single'
  /**
   * Redlock: several nodes report the same change; duplicates are dropped, stale `acquired`
   * news too, and `released` loses its token (it may carry one node's own counter).
   */
  | 'quorum';

export interface EventSource {
  /** A dedicated connection, not yet connected (`lazyConnect`); the hub connects it. */
  subscriber: Redis;
  db: number;
}

export interface LockEventsOptions {
  prefix: string;
  sources: EventSource[];
  /** Subscribe to keyspace expiry notifications, enabling them with CONFIG SET if allowed. */
  keyspace: boolean;
  mode: EventMode;
  clock: Clock;
  /**
   * How many sources must have subscribed for `subscribed` to resolve (default all). Redlock
   * needs only a quorum, so that one node down at start-up does not hold every call up.
   */
  sourcesNeeded?: number;
  /** Called after a source subscribed again following a disconnect (events may be missed). */
  onResubscribed?: (source: number) => void;
}

export interface LockEvents {
  watch(name: string, listener: (event: LockEvent) => void): Unsubscribe;
  /**
   * Calls `listener` with the id of each entry that leaves `name`'s fair queue (granted, gone,
   * or no longer counting), as the queue scripts publish it.
   */
  watchQueue(name: string, listener: (id: string) => void): Unsubscribe;
  /** Delivers an event to the watchers of `event.name` (resynchronisation, wake-ups). */
  deliver(event: LockEvent): void;
  /** Names with at least one watcher. */
  watchedNames(): string[];
  /** The token of the last grant of `name` seen on the event stream ('single' mode). */
  lastToken(name: string): bigint | undefined;
  /** Sets what `lastToken` reports (after a resynchronisation read the current holder). */
  setLastToken(name: string, token: bigint | undefined): void;
  /** Records a token granted through a reply, so older `acquired` news is recognised as stale. */
  noteGrant(name: string, token: bigint): void;
  /** Resolves once `sourcesNeeded` sources have subscribed for the first time. */
  readonly subscribed: Promise<void>;
  readonly isSubscribed: boolean;
  /**
   * Undefined when a look at `name` may go ahead: the first subscription is in place, and so is
   * the name's channel if anyone here watches it; otherwise resolves once they are.
   */
  whenSubscribed(name: string): Promise<void> | undefined;
  /** True while every source has keyspace expiry notifications switched on. */
  expiryEventsOn(): boolean;
  close(): Promise<void>;
}

interface WatchEntry extends ListenerEntry {
  /** The name as event messages carry it. */
  hex: string;
  lastToken: bigint | undefined;
  highest: bigint | undefined;
  /** 'quorum' mode: recently delivered event keys and when, for deduplication. */
  recent: Map<string, number> | undefined;
}

const DEDUPE_WINDOW_MS = 5_000;

interface Parsed {
  /** `asked`: a release request (`asked <hex name> <request id> [+reason]`). */
  type: 'acquired' | 'released' | 'revoked' | 'expired' | 'asked';
  entry: WatchEntry;
  token: bigint;
  owner: string;
  /** A shared grant (`shared` messages), with the holders after it. */
  shared?: { holders: number };
}

/** A message about a change of holder (every kind but `asked`). */
type ChangeMessage = Parsed & { type: Exclude<Parsed['type'], 'asked'> };

const DIGITS = /^[0-9]+$/;

/**
 * Parses `<type> <hex name> <token> <owner>` (and `shared <hex name> <token> <holders> <owner>`),
 * looking the name up before anything else: a channel lingers a moment after its last watcher
 * left (event-channels.ts), and its news is then for nobody here, which costs no decoding.
 */
function parseMessage(message: string, byHex: Map<string, WatchEntry>): Parsed | undefined {
  const first = message.indexOf(' ');
  const second = message.indexOf(' ', first + 1);
  let third = message.indexOf(' ', second + 1);
  if (first < 0 || second < 0 || third < 0) return undefined;
  const entry = byHex.get(message.slice(first + 1, second));
  if (!entry) return undefined;
  const kind = message.slice(0, first);
  const digits = message.slice(second + 1, third);
  if (!DIGITS.test(digits)) return undefined;
  if (kind === 'shared') {
    const fourth = message.indexOf(' ', third + 1);
    if (fourth < 0) return undefined;
    const holders = Number(message.slice(third + 1, fourth));
    third = fourth;
    return {
      type: 'acquired',
      entry,
      token: BigInt(digits),
      owner: message.slice(third + 1),
      shared: { holders },
    };
  }
  if (
    kind !== 'acquired' &&
    kind !== 'released' &&
    kind !== 'revoked' &&
    kind !== 'expired' &&
    kind !== 'asked'
  ) {
    return undefined;
  }
  return { type: kind, entry, token: BigInt(digits), owner: message.slice(third + 1) };
}

/** A grant's event: with its mode always (core needs it with shared modes), and its holders. */
function grantEvent(name: string, parsed: Parsed): LockEvent {
  const { token, owner, shared } = parsed;
  return shared
    ? { name, type: 'acquired', token, owner, mode: 'shared', holders: shared.holders }
    : { name, type: 'acquired', token, owner, mode: 'exclusive', holders: 1 };
}

/**
 * Queue departures (`left <hex name> <sequence> <id>`) to their watchers, by hex name; a name's
 * departure watchers hold its channel.
 */
function queueWatchers(channels: EventChannels) {
  const byHex = new Map<string, Set<(id: string) => void>>();
  return {
    watch(name: string, listener: (id: string) => void): Unsubscribe {
      const hex = encodeName(name);
      const listeners = getOrCreate(byHex, hex, () => {
        channels.hold(hex);
        return new Set();
      }).add(listener);
      return () => {
        listeners.delete(listener);
        if (listeners.size > 0 || byHex.get(hex) !== listeners) return;
        byHex.delete(hex);
        channels.release(hex);
      };
    },
    /** Whether `message` was a departure (delivered if anyone here watches its name). */
    deliver(message: string): boolean {
      if (!message.startsWith('left ')) return false;
      const [, hex, , id] = message.split(' ', 4);
      const listeners = hex === undefined ? undefined : byHex.get(hex);
      if (listeners && id) for (const listener of [...listeners]) listener(id);
      return true;
    },
    clear: () => byHex.clear(),
  };
}

/** Adds `K` and `x` to the server's notify-keyspace-events flags; false if not allowed. */
async function enableKeyspaceExpiry(subscriber: Redis): Promise<boolean> {
  try {
    const reply = (await subscriber.config('GET', 'notify-keyspace-events')) as unknown;
    const current = Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : '';
    const hasK = current.includes('K');
    const hasExpired = current.includes('x') || current.includes('A');
    if (hasK && hasExpired) return true;
    // Merge rather than overwrite: other users of this Redis may rely on their own flags.
    const wanted = `${current}${hasK ? '' : 'K'}${hasExpired ? '' : 'x'}`;
    await subscriber.config('SET', 'notify-keyspace-events', wanted);
    return true;
  } catch {
    // Managed Redis often refuses CONFIG: expiries then reach waiters through core's timers.
    return false;
  }
}

/**
 * Until the first subscription and `name`'s channel are in place, a call on `name` waits for
 * them, within what is left of its `commandTimeoutMs` since `startedAt` (on `clock`): an event
 * published before them could be missed (see event-channels.ts for why this ordering is enough).
 */
export async function subscribedWithin(
  clock: Clock,
  events: LockEvents,
  commandTimeoutMs: number,
  startedAt: number,
  name: string,
): Promise<void> {
  const pending = events.whenSubscribed(name);
  if (pending === undefined) return;
  await within(clock, pending, commandTimeoutMs - (clock.now() - startedAt));
}

/**
 * The event hub of one or more Redis nodes: one subscriber connection per node serves every
 * watched name (see `LockEventsOptions.mode` for how several nodes' reports are merged).
 */
export function createLockEvents(options: LockEventsOptions): LockEvents {
  const byHex = new Map<string, WatchEntry>();
  let resolveSubscribed: () => void = () => {};
  const subscribed = new Promise<void>((resolve) => {
    resolveSubscribed = resolve;
  });
  const channels = createEventChannels({
    prefix: options.prefix,
    subscribers: options.sources.map((source) => source.subscriber),
    needed: options.sourcesNeeded ?? options.sources.length,
    clock: options.clock,
  });
  const hub: EventHub = {
    options,
    channels,
    byHex,
    entries: watchEntries(byHex, channels),
    departures: queueWatchers(channels),
    expiryOn: options.sources.map(() => false),
    subscribedOnce: options.sources.map(() => false),
    closed: false,
    isSubscribed: false,
    resolveSubscribed,
  };
  const { entries } = hub;
  for (const [index, source] of options.sources.entries()) attach(hub, source, index);

  return {
    watch: (name, listener) => entries.watch(name, listener),
    watchQueue: hub.departures.watch,
    deliver: (event) => entries.deliver(event.name, event),
    watchedNames: () => entries.names(),
    lastToken: (name) => entries.get(name)?.lastToken,
    setLastToken(name, token) {
      const entry = entries.get(name);
      if (!entry) return;
      entry.lastToken = token;
      if (token !== undefined) raiseHighest(entry, token);
    },
    noteGrant(name, token) {
      const entry = entries.get(name);
      if (entry) raiseHighest(entry, token);
    },
    subscribed,
    get isSubscribed() {
      return hub.isSubscribed;
    },
    whenSubscribed(name) {
      const channel = channels.pending(encodeName(name));
      if (hub.isSubscribed) return channel;
      return channel ? Promise.all([subscribed, channel]).then(() => {}) : subscribed;
    },
    expiryEventsOn: () => options.keyspace && hub.expiryOn.every(Boolean),
    close: () => close(hub),
  };
}

/** What the parts of one event hub share. */
interface EventHub {
  readonly options: LockEventsOptions;
  /** The name channels subscribed on every source. */
  readonly channels: EventChannels;
  /** The watched names' entries by the name as event messages carry it. */
  readonly byHex: Map<string, WatchEntry>;
  readonly entries: LockListeners<WatchEntry>;
  readonly departures: ReturnType<typeof queueWatchers>;
  /** Per source: whether keyspace expiry notifications were on when it first subscribed. */
  readonly expiryOn: boolean[];
  /** Per source: whether it has subscribed at least once. */
  readonly subscribedOnce: boolean[];
  closed: boolean;
  isSubscribed: boolean;
  readonly resolveSubscribed: () => void;
}

/** Per-name entries, each also found by its hex name (and its channel held) while watched. */
function watchEntries(
  byHex: Map<string, WatchEntry>,
  channels: EventChannels,
): LockListeners<WatchEntry> {
  return new LockListeners<WatchEntry>({
    create(name) {
      const entry: WatchEntry = {
        name,
        hex: encodeName(name),
        listeners: new Set(),
        lastToken: undefined,
        highest: undefined,
        recent: undefined,
      };
      byHex.set(entry.hex, entry);
      channels.hold(entry.hex);
      return entry;
    },
    dropped(entry) {
      byHex.delete(entry.hex);
      channels.release(entry.hex);
    },
  });
}

function deliverTo(entry: WatchEntry, event: LockEvent): void {
  deliverEvent(entry.listeners, event);
}

/** `token` becomes the highest seen for `entry` unless a higher one was. */
function raiseHighest(entry: WatchEntry, token: bigint): void {
  if (entry.highest === undefined || token > entry.highest) entry.highest = token;
}

/** Delivers a grant unless a higher token was seen already (stale news). */
function deliverGrant(entry: WatchEntry, parsed: Parsed): void {
  if (entry.highest !== undefined && parsed.token < entry.highest) return;
  entry.highest = parsed.token;
  deliverTo(entry, grantEvent(entry.name, parsed));
}

/** 'quorum' mode: whether `key` was delivered for `entry` within the dedupe window. */
function isDuplicate(clock: Clock, entry: WatchEntry, key: string): boolean {
  const now = clock.now();
  entry.recent ??= new Map();
  for (const [seen, at] of entry.recent) {
    if (now - at > DEDUPE_WINDOW_MS) entry.recent.delete(seen);
  }
  if (entry.recent.has(key)) return true;
  entry.recent.set(key, now);
  return false;
}

/** The release request an `asked` message carries: its reason follows a `+`, when given. */
function askedEvent(parsed: Parsed): LockEvent {
  const event: LockEvent = { name: parsed.entry.name, type: 'releaseRequested' };
  if (parsed.owner.startsWith('+')) event.reason = parsed.owner.slice(1);
  return event;
}

function onLockMessage(hub: EventHub, parsed: Parsed): void {
  if (!hub.entries.isCurrent(parsed.entry)) return;
  if (parsed.type === 'asked') {
    // Several Redlock nodes carry the same request: its id tells them apart.
    const { clock } = hub.options;
    if (hub.options.mode === 'quorum' && isDuplicate(clock, parsed.entry, `asked:${parsed.token}`))
      return;
    deliverTo(parsed.entry, askedEvent(parsed));
    return;
  }
  const change = parsed as ChangeMessage;
  if (hub.options.mode === 'quorum') onQuorumMessage(hub.options.clock, change);
  else onSingleMessage(change);
}

function onQuorumMessage(clock: Clock, parsed: ChangeMessage): void {
  const { type, entry, token, owner } = parsed;
  const name = entry.name;
  if (isDuplicate(clock, entry, `${type}:${token}`)) return;
  if (type === 'acquired') {
    deliverGrant(entry, parsed);
    return;
  }
  // A release may come from a failed attempt's clean-up, labelled with one node's own
  // counter: pass it on as a wake-up only.
  deliverTo(entry, type === 'released' ? { name, type } : { name, type, token, owner });
}

function onSingleMessage(parsed: ChangeMessage): void {
  const { type, entry, token, owner } = parsed;
  if (type === 'acquired') {
    // Only an exclusive lease's end is reported by Redis without its token (see onExpired).
    if (!parsed.shared) entry.lastToken = token;
    deliverGrant(entry, parsed);
    return;
  }
  if (entry.lastToken === token) entry.lastToken = undefined;
  deliverTo(entry, { name: entry.name, type, token, owner });
}

/** Redis expired an exclusive lock key (`token` undefined) or a shared holder's marker. */
function onExpired(hub: EventHub, name: string, holder?: bigint): void {
  const entry = hub.entries.get(name);
  if (!entry) return;
  const { mode, clock } = hub.options;
  if (mode === 'quorum') {
    if (isDuplicate(clock, entry, `expired@${Math.floor(clock.now() / 1_000)}`)) return;
    deliverTo(entry, { name, type: 'expired' });
    return;
  }
  if (holder !== undefined) {
    deliverTo(entry, { name, type: 'expired', token: holder });
    return;
  }
  const token = entry.lastToken;
  entry.lastToken = undefined;
  deliverTo(
    entry,
    token === undefined ? { name, type: 'expired' } : { name, type: 'expired', token },
  );
}

/** A keyspace notification on `from`: an expiry of a lock key or a shared holder's marker. */
function onKeyspaceMessage(hub: EventHub, keyspacePrefix: string, from: string, message: string) {
  if (message !== 'expired' || !from.startsWith(keyspacePrefix)) return;
  const { prefix } = hub.options;
  const key = from.slice(keyspacePrefix.length);
  const name = nameOfLockKey(prefix, key);
  if (name !== undefined) {
    onExpired(hub, name);
    return;
  }
  const holder = holderOfMarkKey(prefix, key);
  if (holder !== undefined) onExpired(hub, holder.name, holder.token);
}

/** Listens to `source`'s messages and connects it; each 'ready' subscribes again. */
function attach(hub: EventHub, source: EventSource, index: number): void {
  const { subscriber, db } = source;
  const keyspacePrefix = keyspaceChannelPrefix(db);
  subscriber.on('message', (from: string, message: string) => {
    if (!hub.channels.isOurs(from) || hub.departures.deliver(message)) return;
    const parsed = parseMessage(message, hub.byHex);
    if (parsed) onLockMessage(hub, parsed);
  });
  subscriber.on('pmessage', (_pattern: string, from: string, message: string) =>
    onKeyspaceMessage(hub, keyspacePrefix, from, message),
  );
  subscriber.on('close', () => hub.channels.disconnected(index));
  subscriber.on('ready', () => {
    subscribe(hub, source, index).catch(() => {
      // The connection dropped mid-way; the next 'ready' tries again.
    });
  });
  subscriber.connect().catch(() => {
    // ioredis keeps reconnecting on its own; 'ready' subscribes when it gets there.
  });
}

/**
 * On a (re)connected source: the keyspace patterns, the name channels, then who must hear of
 * it. CONFIG first: once it subscribes, the connection takes no other command.
 */
async function subscribe(hub: EventHub, source: EventSource, index: number): Promise<void> {
  const { options, subscribedOnce } = hub;
  const { subscriber, db } = source;
  if (options.keyspace) {
    const on = await enableKeyspaceExpiry(subscriber);
    // Confirmed once is what `capabilities` reports; a later refusal (a failover to a
    // server that forbids CONFIG) is covered by the resynchronisation after reconnects.
    if (!subscribedOnce[index]) hub.expiryOn[index] = on;
  }
  const names = hub.channels.subscribeAll(index);
  if (options.keyspace) {
    await subscriber.psubscribe(
      keyspacePattern(options.prefix, db),
      holderKeyspacePattern(options.prefix, db),
    );
  }
  await names;
  if (hub.closed) return;
  if (subscribedOnce[index]) {
    // Events may have been missed while the stream was down.
    options.onResubscribed?.(index);
    return;
  }
  subscribedOnce[index] = true;
  const needed = options.sourcesNeeded ?? options.sources.length;
  if (!hub.isSubscribed && subscribedOnce.filter(Boolean).length >= needed) {
    hub.isSubscribed = true;
    hub.resolveSubscribed();
  }
}

async function close(hub: EventHub): Promise<void> {
  hub.closed = true;
  hub.channels.close();
  hub.entries.clear();
  hub.byHex.clear();
  hub.departures.clear();
  // disconnect, not QUIT: a stalled server would never answer QUIT.
  for (const { subscriber } of hub.options.sources) subscriber.disconnect();
}
