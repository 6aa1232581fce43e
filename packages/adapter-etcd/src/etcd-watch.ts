import {
  type Clock,
  getOrCreate,
  type LockEvent,
  settlesWithin,
  systemClock,
  type Unsubscribe,
} from '@dlm/core';
import type { Etcd3, IWatchResponse, Watcher } from 'etcd3';
import { type EtcdKeys, parseAsk } from './etcd-keys.js';
import { ownerOfValue } from './etcd-value.js';

/** `lease`: for `acquired`, the lease the lock key was put on. */
type Listener = (event: LockEvent, lease?: string) => void;
/** Told the key of a deleted waiter, or undefined when events may have been missed. */
/** `revision`: the revision that deleted the key. */
type QueueListener = (deletedKey: string | undefined, revision?: string) => void;

/**
 * One etcd watch on the adapter's whole prefix, dispatched to per-name listeners: one gRPC
 * stream per backend whatever the number of names watched.
 *
 * Why a delete is a release or an expiry: a release (or revoke) is a transaction that deletes
 * the lock key and, in the same revision, writes the marker key with `released`/`revoked`. etcd
 * delivers every event of one revision in one watch response, so a delete whose revision has no
 * marker was done by the lessor: the lease expired.
 */
export interface PrefixWatch {
  /** Resolves once the watch stream is established (it replays from there on reconnects). */
  ready(): Promise<void>;
  subscribe(name: string, listener: Listener): Unsubscribe;
  /** Deletions of waiter keys in `name`'s queue (a waiter watches its predecessor's). */
  subscribeQueue(name: string, listener: QueueListener): Unsubscribe;
  /** Deletions of `name`'s lock-delay key (etcd-delay.ts): the delay is over, or released. */
  subscribeDelayEnd(name: string, listener: () => void): Unsubscribe;
  close(): Promise<void>;
}

function addTo<T>(map: Map<string, Set<T>>, name: string, listener: T): Unsubscribe {
  getOrCreate(map, name, () => new Set()).add(listener);
  return () => {
    const current = map.get(name);
    if (!current) return;
    current.delete(listener);
    if (current.size === 0) map.delete(name);
  };
}

/** Tells each of `name`'s listeners: one listener's failure must not keep the others from hearing. */
function tell<T>(map: Map<string, Set<T>>, name: string, call: (listener: T) => void): void {
  for (const listener of [...(map.get(name) ?? [])]) {
    try {
      call(listener);
    } catch {}
  }
}

type WatchEvent = NonNullable<IWatchResponse['events']>[number];

/**
 * The lock event of a put or delete of `name`'s lock key or of one of its shared holder keys
 * (each shared holder is its own key: one `acquired` and one end event per holder), with the
 * lease a grant's key went on; `markers`: the release/revoke markers of the response, by
 * revision (a delete without one is an expiry).
 */
function lockEventOf(
  event: WatchEvent,
  name: string,
  shared: boolean,
  markers: ReadonlyMap<string, 'released' | 'revoked'>,
): { event: LockEvent; lease?: string } | undefined {
  const mode = shared ? 'shared' : 'exclusive';
  if (event.type === 'Put') {
    // version 1 is the put that created the key: a grant. Later puts only move the key to a
    // fresh lease (re-acquire, extend): the same lease, nothing to report.
    if (event.kv.version !== '1') return undefined;
    const token = BigInt(event.kv.create_revision);
    const owner = ownerOfValue(event.kv.value);
    return { event: { name, type: 'acquired', token, owner, mode }, lease: event.kv.lease };
  }
  const previous = event.prev_kv;
  return {
    event: {
      name,
      type: markers.get(event.kv.mod_revision) ?? 'expired',
      ...(previous
        ? { token: BigInt(previous.create_revision), owner: ownerOfValue(previous.value) }
        : {}),
      ...(shared ? { mode } : {}),
    },
  };
}

/** `clock`: where the restart delay and close's time limit are set. */
export function watchPrefix(
  client: Etcd3,
  keys: EtcdKeys,
  clock: Clock = systemClock,
): PrefixWatch {
  const listeners = new Map<string, Set<Listener>>();
  const queueListeners = new Map<string, Set<QueueListener>>();
  const delayListeners = new Map<string, Set<() => void>>();
  let watcher: Watcher | undefined;
  let closed = false;
  let markReady: () => void = () => {};
  const readyPromise = new Promise<void>((resolve) => {
    markReady = resolve;
  });

  const emit = (name: string, event: LockEvent, lease?: string) =>
    tell(listeners, name, (listener) => listener(event, lease));
  const emitQueue = (name: string, deletedKey: string | undefined, revision?: string) =>
    tell(queueListeners, name, (listener) => listener(deletedKey, revision));
  const emitDelayEnd = (name: string) => tell(delayListeners, name, (listener) => listener());

  function onData(response: IWatchResponse): void {
    const markers = new Map<string, 'released' | 'revoked'>();
    for (const event of response.events ?? []) {
      if (event.type === 'Put' && event.kv.key.toString() === keys.markerKey) {
        const value = event.kv.value.toString();
        markers.set(event.kv.mod_revision, value === 'revoked' ? 'revoked' : 'released');
      }
    }
    for (const event of response.events ?? []) {
      const key = event.kv.key.toString();
      if (key === keys.askKey) {
        if (event.type === 'Put') onAsk(event.kv.value);
        continue;
      }
      if (key.startsWith(keys.delayPrefix)) {
        if (event.type === 'Delete') emitDelayEnd(key.slice(keys.delayPrefix.length));
        continue;
      }
      if (event.type === 'Delete' && key.startsWith(keys.queuePrefix)) {
        const name = keys.nameOfQueueKey(key);
        if (name !== undefined) emitQueue(name, key, event.kv.mod_revision);
        continue;
      }
      const shared = key.startsWith(keys.sharedPrefix);
      const name = shared
        ? keys.nameOfSharedKey(key)
        : key.startsWith(keys.lockPrefix)
          ? key.slice(keys.lockPrefix.length)
          : undefined;
      if (name === undefined || !listeners.has(name)) continue;
      const lock = lockEventOf(event, name, shared, markers);
      if (lock) emit(name, lock.event, lock.lease);
    }
  }

  /** A release request (a put of the ask key): the name's watchers hear it. */
  function onAsk(value: Buffer): void {
    const asked = parseAsk(value);
    if (!asked || !listeners.has(asked.name)) return;
    const event: LockEvent = { name: asked.name, type: 'releaseRequested' };
    if (asked.reason !== undefined) event.reason = asked.reason;
    emit(asked.name, event);
  }

  /** After a gap in what we saw, every waiter must ask again: tell them "something changed". */
  function wakeEveryone(): void {
    for (const name of listeners.keys()) emit(name, { name, type: 'released' });
    for (const name of queueListeners.keys()) emitQueue(name, undefined);
    for (const name of delayListeners.keys()) emitDelayEnd(name);
  }

  function start(afterGap: boolean): void {
    if (closed) return;
    const created = client.watch().prefix(keys.prefix).withPreviousKV().watcher();
    watcher = created;
    created.on('data', onData);
    created.once('connected', () => {
      markReady();
      if (afterGap) wakeEveryone();
    });
    // etcd cancelled the watch (its start revision was compacted away, or similar): it will not
    // resume by itself. Start a new one and wake everyone, since events may have been missed.
    created.on('error', () => {
      if (watcher !== created) return;
      created.removeAllListeners('data');
      created.cancel().catch(() => {});
      clock.setTimer(() => start(true), 100);
    });
  }

  start(false);

  return {
    ready: () => readyPromise,
    subscribe: (name, listener) => addTo(listeners, name, listener),
    subscribeQueue: (name, listener) => addTo(queueListeners, name, listener),
    subscribeDelayEnd: (name, listener) => addTo(delayListeners, name, listener),
    async close() {
      closed = true;
      listeners.clear();
      queueListeners.clear();
      delayListeners.clear();
      const current = watcher;
      watcher = undefined;
      current?.removeAllListeners('data');
      // Cancelling waits for etcd's acknowledgement; do not let a dead cluster hold up close().
      if (current) await settlesWithin(clock, current.cancel(), 500);
    },
  };
}
