import type { LockEvent, LockMode } from '@dlm/core';

/**
 * The "service" the example backend talks to: one in-process store that several backends (dlm
 * servers) share, as several servers share a Redis or an etcd. Every method is one synchronous
 * step, so each is atomic; events are delivered after the step, as a store's notifications are.
 */

export interface Holder {
  owner: string;
  keyHash: string | undefined;
  token: bigint;
  mode: LockMode;
  limit: number;
  /** `Date.now()` at which the lease ends (the store's own clock). */
  endsAt: number;
  /** Its lock-delay (exclusive only; 0: none): see `NameState.delayUntil`. */
  lockDelayMs: number;
  /**
   * `Date.now()` past which no renewal keeps the lease: its cap on holding, set in the step
   * that grants it (absent: none).
   */
  capAt?: number;
  timer: ReturnType<typeof setTimeout>;
}

/** A waiter's entry in a name's queue. */
export interface Entry {
  id: string;
  mode: LockMode;
  limit: number;
}

/** What the store tells a name's listeners: a lock event, or an entry leaving the queue. */
export type StoreEvent = { lock: LockEvent } | { left: string };

interface NameState {
  holders: Holder[];
  queue: Entry[];
  /**
   * `Date.now()` until which nobody is granted the name: set in the step that ends a holder
   * with a lock-delay by expiry (its end plus the delay) or revocation (now plus the delay).
   */
  delayUntil?: number;
}

export class MemoryStore {
  private lastToken = 0n;
  private lastEntry = 0;
  private readonly names = new Map<string, NameState>();
  private readonly listeners = new Map<string, Set<(event: StoreEvent) => void>>();

  /** The name's live holders (by token) and queue; ended holders are dropped first. */
  state(name: string): NameState {
    let state = this.names.get(name);
    if (!state) {
      state = { holders: [], queue: [] };
      this.names.set(name, state);
    }
    const now = Date.now();
    for (const holder of state.holders.filter((one) => one.endsAt <= now)) {
      this.end(name, holder, 'expired');
    }
    return state;
  }

  nextToken(): bigint {
    this.lastToken += 1n;
    return this.lastToken;
  }

  nextEntry(): string {
    this.lastEntry += 1;
    return `${this.lastEntry}`;
  }

  /** Adds a holder (a fresh grant): its lease ends by itself at `ttlMs`. */
  /** How long the name's lock-delay has left (0: none). */
  delayLeft(name: string): number {
    const until = this.state(name).delayUntil;
    return until === undefined ? 0 : Math.max(0, until - Date.now());
  }

  grant(name: string, holder: Omit<Holder, 'token' | 'endsAt' | 'timer'>, ttlMs: number): Holder {
    const state = this.state(name);
    const token = this.nextToken();
    const added: Holder = { ...holder, token, endsAt: 0, timer: setTimeout(() => {}, 0) };
    this.renew(name, added, ttlMs);
    state.holders.push(added);
    const { owner, mode } = holder;
    this.tell(name, {
      lock: { name, type: 'acquired', token, owner, mode, holders: state.holders.length },
    });
    return added;
  }

  /** Restarts a holder's lease at `ttlMs`, up to its cap on holding: the ms it now runs. */
  renew(name: string, holder: Holder, ttlMs: number): number {
    clearTimeout(holder.timer);
    const now = Date.now();
    const ms = holder.capAt === undefined ? ttlMs : Math.min(ttlMs, holder.capAt - now);
    holder.endsAt = now + ms;
    this.expireAtEnd(name, holder);
    return ms;
  }

  /** The store ends a lease by itself at its end (a timer may fire a little early: again). */
  private expireAtEnd(name: string, holder: Holder): void {
    holder.timer = setTimeout(
      () => {
        if (holder.endsAt <= Date.now()) this.end(name, holder, 'expired');
        else this.expireAtEnd(name, holder);
      },
      Math.max(1, holder.endsAt - Date.now()),
    );
  }

  end(name: string, holder: Holder, type: 'released' | 'expired' | 'revoked'): void {
    const state = this.names.get(name);
    const at = state?.holders.indexOf(holder) ?? -1;
    if (!state || at < 0) return;
    clearTimeout(holder.timer);
    state.holders.splice(at, 1);
    if (holder.lockDelayMs > 0 && type !== 'released') {
      const end = type === 'expired' ? holder.endsAt : Date.now();
      state.delayUntil = Math.max(state.delayUntil ?? 0, end + holder.lockDelayMs);
    }
    const { token, owner, mode } = holder;
    this.tell(name, { lock: { name, type, token, owner, mode, holders: state.holders.length } });
    this.forgetIfIdle(name, state);
  }

  /** Removes a queue entry; true when it was there. */
  leave(name: string, id: string): boolean {
    const state = this.names.get(name);
    const at = state?.queue.findIndex((entry) => entry.id === id) ?? -1;
    if (!state || at < 0) return false;
    state.queue.splice(at, 1);
    this.tell(name, { left: id });
    this.forgetIfIdle(name, state);
    return true;
  }

  listen(name: string, listener: (event: StoreEvent) => void): () => void {
    const set = this.listeners.get(name) ?? new Set();
    this.listeners.set(name, set.add(listener));
    return () => {
      set.delete(listener);
      if (set.size === 0) this.listeners.delete(name);
    };
  }

  /** A release request: every listener of the name, on every backend over this store, hears it. */
  ask(name: string, reason: string | undefined): void {
    const lock: LockEvent = { name, type: 'releaseRequested' };
    if (reason !== undefined) lock.reason = reason;
    this.tell(name, { lock });
  }

  private tell(name: string, event: StoreEvent): void {
    const set = this.listeners.get(name);
    if (set)
      queueMicrotask(() => {
        for (const listener of [...set]) listener(event);
      });
  }

  private forgetIfIdle(name: string, state: NameState): void {
    if (state.holders.length > 0 || state.queue.length > 0) return;
    // A name in its lock-delay is kept until the delay has passed.
    if ((state.delayUntil ?? 0) > Date.now()) return;
    this.names.delete(name);
  }
}
