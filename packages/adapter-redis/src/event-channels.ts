import { backgroundTimer, type Clock, type Timer } from '@dlm/core';
import type { Redis } from 'ioredis';
import { nameChannel } from './key-encoding.js';

/**
 * The per-name event channels one event hub subscribes to, on each of its subscriber
 * connections. The scripts publish each of a name's events once, on that name's channel
 * (`nameChannel`, as Redisson publishes on `redisson_lock__channel:{name}`), so a service hears
 * only the names it holds, waits on or watches, instead of every name's events.
 *
 * A channel is subscribed when its name gets its first hold (a watch, a queue watch) and
 * unsubscribed once it has had none for `IDLE_MS` (a sweep every `IDLE_MS`: within twice that).
 * A name is typically taken and released again and again, and a SUBSCRIBE and an UNSUBSCRIBE
 * per pair would cost Redis more than the messages they save. Until the sweep, the channel's
 * messages still arrive and are dropped unread.
 *
 * No missed wake-up: the hold comes first (core opens a name before it tries or queues), and
 * every look at Redis waits for `pending(hex)` (the channel confirmed by enough connections)
 * before it is sent. A release published before the confirmation is therefore already in the
 * state the look reads; one published after it reaches this service.
 */

/** How long a channel with no holds stays subscribed (ms), and how often idle ones are swept. */
export const IDLE_MS = 1_000;

interface Channel {
  readonly hex: string;
  /** The channel's name (`nameChannel`). */
  readonly name: string;
  holds: number;
  /** The subscriber connections (source indexes) that confirmed the subscription. */
  readonly confirmedOn: Set<number>;
  /** When the last hold went (clock ms); undefined while held. */
  idleSince: number | undefined;
  /** Resolved once `needed` connections confirmed; made by the first look that has to wait. */
  confirmed: Promise<void> | undefined;
  resolve: () => void;
}

export interface EventChannels {
  /** One more hold of the channel of `hex` (a name's hex form); subscribes on the first. */
  hold(hex: string): void;
  /** One hold fewer; the channel is unsubscribed once idle for `IDLE_MS`. */
  release(hex: string): void;
  /**
   * Undefined when the channel of `hex` is confirmed on enough connections, or not held (nobody
   * here listens, so nothing can be missed); otherwise resolves once it is.
   */
  pending(hex: string): Promise<void> | undefined;
  /**
   * Source `index` (re)connected and is ready for subscriptions: subscribes every channel
   * kept here on it; resolves once Redis confirmed them.
   */
  subscribeAll(index: number): Promise<void>;
  /**
   * Source `index` lost its connection: nothing is subscribed on it until `subscribeAll`. Its
   * confirmations stand: what the gap missed, the resynchronisation after it reads back.
   */
  disconnected(index: number): void;
  /** Whether `channel` (as a message names it) is one of ours. */
  isOurs(channel: string): boolean;
  close(): void;
}

export function createEventChannels(options: {
  prefix: string;
  subscribers: readonly Redis[];
  /** How many connections must confirm a channel before a look may rely on it. */
  needed: number;
  clock: Clock;
}): EventChannels {
  const { prefix, subscribers, needed, clock } = options;
  const byHex = new Map<string, Channel>();
  /** The channels without holds, until the sweep unsubscribes them. */
  const idle = new Set<Channel>();
  const live = subscribers.map(() => false);
  const empty = nameChannel(prefix, '');
  const ourPrefix = empty.slice(0, empty.indexOf('{') + 1);
  let sweep: Timer | undefined;
  let closed = false;

  const confirm = (channel: Channel, index: number) => {
    if (byHex.get(channel.hex) !== channel || !live[index]) return;
    channel.confirmedOn.add(index);
    if (channel.confirmedOn.size >= needed) channel.resolve();
  };

  /** Subscribes `channels` on source `index`; each is confirmed there when Redis answers. */
  const subscribeOn = async (index: number, channels: Channel[]) => {
    const subscriber = subscribers[index];
    if (!subscriber || channels.length === 0) return;
    try {
      await subscriber.subscribe(...channels.map((channel) => channel.name));
    } catch {
      // The connection dropped: its next `subscribeAll` subscribes them again.
      return;
    }
    for (const channel of channels) confirm(channel, index);
  };

  const unsubscribeIdle = () => {
    sweep = undefined;
    if (closed) return;
    const now = clock.now();
    const gone: string[] = [];
    let idleLeft = false;
    for (const channel of idle) {
      if (now - (channel.idleSince ?? now) < IDLE_MS) {
        idleLeft = true;
        continue;
      }
      idle.delete(channel);
      byHex.delete(channel.hex);
      gone.push(channel.name);
    }
    for (const [index, subscriber] of subscribers.entries()) {
      if (live[index] && gone.length > 0) subscriber.unsubscribe(...gone).catch(() => {});
    }
    if (idleLeft) sweepLater();
  };

  const sweepLater = () => {
    if (sweep || closed) return;
    sweep = backgroundTimer(clock, unsubscribeIdle, IDLE_MS);
  };

  return {
    hold(hex) {
      const kept = byHex.get(hex);
      if (kept) {
        kept.holds += 1;
        kept.idleSince = undefined;
        idle.delete(kept);
        return;
      }
      if (closed) return;
      const channel: Channel = {
        hex,
        name: nameChannel(prefix, hex),
        holds: 1,
        confirmedOn: new Set(),
        idleSince: undefined,
        confirmed: undefined,
        resolve: () => {},
      };
      byHex.set(hex, channel);
      for (const index of subscribers.keys()) {
        if (live[index]) void subscribeOn(index, [channel]);
      }
    },
    release(hex) {
      const channel = byHex.get(hex);
      if (!channel || channel.holds === 0) return;
      channel.holds -= 1;
      if (channel.holds > 0) return;
      channel.idleSince = clock.now();
      idle.add(channel);
      sweepLater();
    },
    pending(hex) {
      const channel = byHex.get(hex);
      if (!channel || channel.holds === 0 || channel.confirmedOn.size >= needed) return undefined;
      channel.confirmed ??= new Promise<void>((resolve) => {
        channel.resolve = resolve;
      });
      return channel.confirmed;
    },
    subscribeAll(index) {
      // Live from this very turn: a channel held from now on is subscribed by `hold` itself.
      live[index] = true;
      return subscribeOn(index, [...byHex.values()]);
    },
    disconnected(index) {
      live[index] = false;
    },
    isOurs: (channel) => channel.startsWith(ourPrefix),
    close() {
      closed = true;
      sweep?.cancel();
      sweep = undefined;
      byHex.clear();
      idle.clear();
    },
  };
}
