import type { Clock, LockEvent, LockState, Timer, Unsubscribe } from '@dlm/core';
import type pg from 'pg';
import { query } from './calls.js';

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
}

interface Entry {
  name: string;
  listeners: Set<(event: LockEvent) => void>;
  /** The lease this server last heard of for the name. */
  known: Known | undefined;
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
}

export interface LockEvents {
  watch(name: string, listener: (event: LockEvent) => void): Unsubscribe;
  /** A lease this server granted or extended: its end is watched for when the name is. */
  noteLease(name: string, lease: Known, ttlMs: number): void;
  /** Learns the holder of a watched name whose grant was not seen here (a refused acquire). */
  learn(name: string): void;
  /** Resolves once the first `LISTEN` is in place. */
  readonly listening: Promise<void>;
  readonly isListening: boolean;
  /** How many times the listening connection was (re)established. */
  readonly connects: number;
  close(): Promise<void>;
}

interface Message {
  t: 'acquired' | 'released' | 'revoked';
  n: string;
  k: string;
  o: string;
  ms: number;
}

const DIGITS = /^[0-9]+$/;

function parse(payload: string | undefined): Message | undefined {
  if (!payload) return undefined;
  try {
    const message = JSON.parse(payload) as Partial<Message>;
    if (
      (message.t === 'acquired' || message.t === 'released' || message.t === 'revoked') &&
      typeof message.n === 'string' &&
      typeof message.k === 'string' &&
      DIGITS.test(message.k) &&
      typeof message.o === 'string'
    ) {
      return message as Message;
    }
  } catch {}
  return undefined;
}

/** Reconnect delays: 100 ms doubling to 2 s, jittered so that many servers do not stampede. */
function reconnectDelayMs(attempt: number): number {
  return (0.5 + Math.random() / 2) * Math.min(2_000, 100 * 2 ** attempt);
}

/** After a lease-end check that could not reach the database, ask again this much later. */
const RECHECK_MS = 1_000;

export function createLockEvents(options: LockEventsOptions): LockEvents {
  const { pool, channel, clock, timeoutMs } = options;
  const entries = new Map<string, Entry>();
  let closed = false;
  let client: pg.PoolClient | undefined;
  let isListening = false;
  let connects = 0;
  let heartbeat: Timer | undefined;
  let reconnectTimer: Timer | undefined;
  let resolveListening: () => void = () => {};
  const listening = new Promise<void>((resolve) => {
    resolveListening = resolve;
  });

  function deliver(entry: Entry, event: LockEvent): void {
    for (const listener of [...entry.listeners]) {
      try {
        listener(event);
      } catch {
        // One listener's failure must not starve the others.
      }
    }
  }

  function setKnown(entry: Entry, known: Known | undefined, ttlMs: number): void {
    entry.known = known;
    entry.version += 1;
    entry.timer?.cancel();
    entry.timer = undefined;
    if (!known) return;
    const version = entry.version;
    // Our clock starts after the database's did (the reply or message came later), so this fires
    // at or after the lease's end on the database clock; the check then asks the database.
    entry.timer = clock.setTimer(() => void check(entry, version), ttlMs + 1);
  }

  /** At a known lease's end: is it over on the database clock? Then say so. */
  async function check(entry: Entry, version: number): Promise<void> {
    let state: LockState | null;
    try {
      state = await options.inspect(entry.name);
    } catch {
      if (entry.version === version && !closed) {
        entry.timer = clock.setTimer(() => void check(entry, version), RECHECK_MS);
      }
      return;
    }
    if (entry.version !== version || entries.get(entry.name) !== entry) return;
    const known = entry.known;
    if (known && state && state.token === known.token) {
      // Extended (by another server, or a check that ran early): wait for the new end.
      setKnown(entry, known, state.ttlRemainingMs);
      return;
    }
    setKnown(
      entry,
      state ? { token: state.token, owner: state.owner } : undefined,
      state?.ttlRemainingMs ?? 0,
    );
    if (known)
      deliver(entry, { name: entry.name, type: 'expired', token: known.token, owner: known.owner });
    if (state) {
      deliver(entry, {
        name: entry.name,
        type: 'acquired',
        token: state.token,
        owner: state.owner,
      });
    }
  }

  /**
   * After the stream was down, events may have been missed: compare what each watched name's
   * watchers last heard with what the database holds, and tell them the difference (or, when
   * that cannot be read, wake them so that waiters ask for themselves).
   */
  async function resynchronise(): Promise<void> {
    await Promise.all(
      [...entries.values()].map(async (entry) => {
        const version = entry.version;
        const before = entry.known;
        let state: LockState | null;
        try {
          state = await options.inspect(entry.name);
        } catch {
          deliver(entry, { name: entry.name, type: 'released' });
          return;
        }
        if (entry.version !== version || entries.get(entry.name) !== entry) return;
        setKnown(
          entry,
          state ? { token: state.token, owner: state.owner } : undefined,
          state?.ttlRemainingMs ?? 0,
        );
        if (state && before && state.token === before.token) return;
        if (before) deliver(entry, { name: entry.name, type: 'expired', token: before.token });
        if (state) {
          deliver(entry, {
            name: entry.name,
            type: 'acquired',
            token: state.token,
            owner: state.owner,
          });
        } else if (!before) {
          deliver(entry, { name: entry.name, type: 'released' });
        }
      }),
    );
  }

  function onMessage(message: Message): void {
    const entry = entries.get(message.n);
    if (!entry) return;
    const token = BigInt(message.k);
    const known = entry.known;
    if (message.t === 'acquired') {
      // Messages arrive in commit order, but a reply may have told us of a newer grant first.
      if (known && token < known.token) return;
      setKnown(entry, { token, owner: message.o }, Number(message.ms) || 0);
    } else if (known && known.token === token) {
      setKnown(entry, undefined, 0);
    }
    deliver(entry, { name: message.n, type: message.t, token, owner: message.o });
  }

  function dropped(from: pg.PoolClient): void {
    if (client !== from) return;
    client = undefined;
    isListening = false;
    heartbeat?.cancel();
    heartbeat = undefined;
    from.release(true);
    if (!closed) scheduleConnect(0);
  }

  function scheduleConnect(attempt: number): void {
    reconnectTimer = clock.setTimer(
      () => void connect(attempt),
      attempt === 0 ? 0 : reconnectDelayMs(attempt),
    );
  }

  async function connect(attempt: number): Promise<void> {
    if (closed) return;
    let next: pg.PoolClient | undefined;
    try {
      next = await pool.connect();
      next.on('error', () => dropped(next!));
      next.on('end', () => dropped(next!));
      next.on('notification', (notification) => {
        if (notification.channel !== channel) return;
        const message = parse(notification.payload);
        if (message) onMessage(message);
      });
      await query(next, `LISTEN "${channel}"`, [], timeoutMs);
    } catch {
      // Not `client` yet, so `dropped` left it alone: released here, once.
      next?.release(true);
      if (!closed) scheduleConnect(attempt + 1);
      return;
    }
    if (closed) {
      next.release(true);
      return;
    }
    client = next;
    isListening = true;
    connects += 1;
    beat(next);
    if (connects === 1) resolveListening();
    else void resynchronise();
  }

  function beat(on: pg.PoolClient): void {
    heartbeat = clock.setTimer(() => {
      if (client !== on) return;
      query(on, 'SELECT 1', [], timeoutMs).then(
        () => {
          if (client === on) beat(on);
        },
        () => dropped(on),
      );
    }, options.heartbeatMs);
  }

  scheduleConnect(0);

  return {
    watch(name, listener) {
      let entry = entries.get(name);
      if (!entry) {
        entry = { name, listeners: new Set(), known: undefined, timer: undefined, version: 0 };
        entries.set(name, entry);
      }
      const own = entry;
      // A wrapper per call, so the same function watched twice is two subscriptions.
      const wrapped = (event: LockEvent) => listener(event);
      own.listeners.add(wrapped);
      return () => {
        own.listeners.delete(wrapped);
        if (own.listeners.size === 0 && entries.get(name) === own) {
          own.timer?.cancel();
          entries.delete(name);
        }
      };
    },
    noteLease(name, lease, ttlMs) {
      const entry = entries.get(name);
      if (!entry) return;
      if (entry.known && lease.token < entry.known.token) return;
      setKnown(entry, lease, ttlMs);
    },
    learn(name) {
      const entry = entries.get(name);
      if (!entry || entry.known) return;
      const version = entry.version;
      options.inspect(name).then(
        (state) => {
          if (!state || entry.version !== version || entries.get(name) !== entry) return;
          setKnown(entry, { token: state.token, owner: state.owner }, state.ttlRemainingMs);
        },
        () => {},
      );
    },
    listening,
    get isListening() {
      return isListening;
    },
    get connects() {
      return connects;
    },
    async close() {
      closed = true;
      reconnectTimer?.cancel();
      heartbeat?.cancel();
      for (const entry of entries.values()) entry.timer?.cancel();
      entries.clear();
      const held = client;
      client = undefined;
      held?.release(true);
    },
  };
}
