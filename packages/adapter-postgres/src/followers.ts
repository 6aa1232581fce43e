import type { Clock, Timer, Unsubscribe } from '@dlm/core';
import { type Caller, query } from './calls.js';
import type { LockEvents } from './events.js';
import type { Statements } from './sql.js';

/**
 * The names this dlm server watches, registered as followers (followers-sql.ts) so that their
 * grants and releases are announced to it. One registration per name, under the name of this
 * server's LISTEN connection (its pid); again after that connection is made again. A name's
 * registrations and removals run one after the other, and `settled` lets an `inspect` wait for
 * the registration in flight: what the inspect reads, and every change after it, reach the
 * watchers.
 */
export interface Followers {
  follow(name: string): Unsubscribe;
  /** The registration of `name` in flight, if any (it never rejects). */
  settled(name: string): Promise<void> | undefined;
  /** The LISTEN connection is new: every followed name is registered under its pid. */
  renew(): void;
  close(): void;
}

/** After a registration failed (the database is away), try again this much later. */
const RETRY_MS = 1_000;

export function createFollowers(options: {
  sql: Statements;
  call: Caller;
  events: LockEvents;
  clock: Clock;
  timeoutMs: number;
}): Followers {
  const { sql, call, events, clock, timeoutMs } = options;
  const counts = new Map<string, number>();
  const inFlight = new Map<string, Promise<void>>();
  const retries = new Map<string, Timer>();
  let closed = false;

  /** Runs `step` for `name` after the name's earlier steps. */
  const chain = (name: string, step: () => Promise<void>) => {
    const next = (inFlight.get(name) ?? Promise.resolve()).then(step).catch(() => {});
    inFlight.set(name, next);
    void next.then(() => {
      if (inFlight.get(name) === next) inFlight.delete(name);
    });
  };

  const firstListen = () =>
    new Promise<number | undefined>((resolve) => {
      const timer = clock.setTimer(() => resolve(undefined), timeoutMs);
      void events.listening.then(() => {
        timer.cancel();
        resolve(events.sessionPid);
      });
    });

  const register = (name: string) => {
    retries.get(name)?.cancel();
    retries.delete(name);
    chain(name, async () => {
      // Not listening yet: the first LISTEN, within the bound (else `renew` registers it later).
      const pid = events.sessionPid ?? (await firstListen());
      if (pid === undefined || closed || !counts.has(name)) return;
      try {
        await call('follow', true, (client) => query(client, sql.follow, [name, pid], timeoutMs));
      } catch {
        if (closed || !counts.has(name)) return;
        retries.set(
          name,
          clock.setTimer(() => register(name), RETRY_MS),
        );
      }
    });
  };

  const unregister = (name: string) => {
    retries.get(name)?.cancel();
    retries.delete(name);
    const pid = events.sessionPid;
    if (pid === undefined) return;
    // A row left behind (the database away) costs extra NOTIFYs until the sweep, nothing else.
    chain(name, async () => {
      if (counts.has(name)) return;
      await call('unfollow', true, (client) => query(client, sql.unfollow, [name, pid], timeoutMs));
    });
  };

  return {
    follow(name) {
      const count = counts.get(name) ?? 0;
      counts.set(name, count + 1);
      if (count === 0) register(name);
      let done = false;
      return () => {
        if (done) return;
        done = true;
        const left = (counts.get(name) ?? 1) - 1;
        if (left > 0) {
          counts.set(name, left);
          return;
        }
        counts.delete(name);
        unregister(name);
      };
    },
    settled: (name) => inFlight.get(name),
    renew() {
      for (const name of counts.keys()) register(name);
    },
    close() {
      closed = true;
      for (const timer of retries.values()) timer.cancel();
      retries.clear();
    },
  };
}
