import { DlmError, formatToken, type LockChange, type LockMode } from '@dlm/core';
import type { FeedEvent, FeedLock } from './lock-feed.js';
import { permittedName } from './lock-handlers.js';
import { allowsPrefix } from './permissions.js';
import { validatePrefix } from './prefix.js';
import type { Handlers, SessionScope } from './session-scope.js';

type WatchMethod = 'lock.watch' | 'lock.watchPrefix' | 'lock.unwatch';

/** Shared modes' fields of a change, as core's `LockChange` gives them (see `watchChange`). */
type ModedChange = LockChange & { mode?: LockMode; holders?: number };

/**
 * What `lock.watch` tells of a change, or null for what it does not report: one notification
 * per holder's grant and end. A grant names the new holder, its mode, and the holders after it;
 * an end only `held` and the holders left (`holders` when core knows it).
 */
function watchChange(watchId: string, name: string, change: ModedChange) {
  // lock.watch reports grants, releases and expiries; a longer lease is none of them.
  if (change.type === 'extended') return null;
  const mode = change.mode ?? 'exclusive';
  const acquired = change.type === 'acquired';
  // Free is none; an exclusive grant is the only holder.
  const holders =
    change.holders ?? (!change.held ? 0 : acquired && mode === 'exclusive' ? 1 : undefined);
  const count = holders === undefined ? {} : { holders };
  if (!acquired) return { watchId, name, held: change.held, ...count };
  return {
    watchId,
    name,
    held: true,
    ...(change.owner === undefined ? {} : { owner: change.owner }),
    ...(change.token === undefined ? {} : { token: formatToken(change.token) }),
    mode,
    ...count,
  };
}

/**
 * The changes of one `lock.watch`, told after its answer and without what the answer showed.
 * A backend tells core of a grant when its event arrives, which on PostgreSQL or ZooKeeper can
 * be after the watch read the state that already holds that grant; and a change that arrives
 * while the state is read would otherwise reach the client before the answer.
 */
function answeredWatch(tell: (change: ModedChange) => void) {
  let held: ModedChange[] | undefined = [];
  /** The token the answer reported: grants up to it are in the answer. */
  let shown: bigint | undefined;
  let stopped = false;
  const pass = (change: ModedChange) => {
    const old = change.type === 'acquired' && change.token !== undefined && shown !== undefined;
    if (!stopped && !(old && change.token! <= shown!)) tell(change);
  };
  return {
    changed(change: ModedChange) {
      if (held) held.push(change);
      else pass(change);
    },
    /** The state read says `token` holds (undefined: free); the answer goes out this turn. */
    answered(token: bigint | undefined) {
      shown = token;
      const waiting = held ?? [];
      // After the answer, which the session sends once the handler's promise settles.
      setImmediate(() => {
        held = undefined;
        for (const change of waiting) pass(change);
      });
    },
    stop() {
      stopped = true;
    },
  };
}

/** What `lock.watchPrefix` tells of a feed event. */
function prefixChange(watchId: string, event: FeedEvent) {
  return {
    watchId,
    name: event.name,
    held: event.held,
    ...(event.owner === undefined ? {} : { owner: event.owner }),
    ...(event.token === undefined ? {} : { token: formatToken(event.token) }),
    event: event.type,
    ...(event.ttlRemainingMs === undefined ? {} : { ttlRemainingMs: event.ttlRemainingMs }),
    waiters: event.waiters,
    ...(event.mode === undefined ? {} : { mode: event.mode }),
    ...(event.limit === undefined ? {} : { limit: event.limit }),
    holders: event.holders,
  };
}

function wireLock(lock: FeedLock) {
  return {
    name: lock.name,
    owner: lock.owner,
    token: formatToken(lock.token),
    ttlRemainingMs: lock.ttlRemainingMs,
    waiters: lock.waiters,
    mode: lock.mode,
    ...(lock.limit === undefined ? {} : { limit: lock.limit }),
    holders: lock.holders.map((holder) => ({
      owner: holder.owner,
      token: formatToken(holder.token),
      ttlRemainingMs: holder.ttlRemainingMs,
    })),
  };
}

/** `lock.watch`, `lock.watchPrefix` and `lock.unwatch` for one session. */
export function watchHandlers(scope: SessionScope): Handlers<WatchMethod> {
  const { service, feed, limits } = scope.context;
  const { watches } = scope;
  let watchSeq = 0;

  /** LIMIT_EXCEEDED when the session has as many watches as it may. */
  function reserveWatch(): void {
    if (watches.size >= limits.maxWatchesPerSession) {
      throw new DlmError(
        'LIMIT_EXCEEDED',
        `a session may have at most ${limits.maxWatchesPerSession} watches`,
      );
    }
  }

  function nextWatchId(): string {
    watchSeq += 1;
    return `w${watchSeq}`;
  }

  function permittedPrefix(params: Record<string, unknown>): string {
    const prefix = validatePrefix(params.prefix, service.limits);
    const { principal } = scope;
    if (!allowsPrefix(principal, 'watch', prefix)) {
      throw new DlmError(
        'FORBIDDEN',
        `token ${JSON.stringify(principal.name)} may not watch the prefix ${JSON.stringify(prefix)}`,
      );
    }
    return prefix;
  }

  return {
    'lock.watch': async (params) => {
      const name = permittedName(scope, params, 'watch');
      reserveWatch();
      const watchId = nextWatchId();
      const watch = answeredWatch((change) => {
        const told = watchChange(watchId, name, change);
        if (told) scope.notify('lock.changed', told);
      });
      // Subscribe before reading the state, so no change between the two is missed.
      const stop = service.watch(name, watch.changed);
      const end = () => {
        watch.stop();
        stop();
      };
      watches.set(watchId, end);
      try {
        const state = await service.get(name);
        watch.answered(state?.token);
        return state
          ? { watchId, held: true, token: formatToken(state.token) }
          : { watchId, held: false };
      } catch (error) {
        watches.delete(watchId);
        end();
        throw error;
      }
    },

    'lock.watchPrefix': async (params) => {
      const prefix = permittedPrefix(params);
      reserveWatch();
      // Locks granted through other servers on a shared backend join the feed first.
      await feed.seed(prefix);
      const watchId = nextWatchId();
      // Subscribing and taking the snapshot happen in the same turn: no change falls between.
      const stop = feed.subscribe(prefix, (event) =>
        scope.notify('lock.changed', prefixChange(watchId, event)),
      );
      watches.set(watchId, stop);
      return { watchId, locks: feed.snapshot(prefix).map(wireLock) };
    },

    'lock.unwatch': async (params) => {
      const { watchId } = params;
      const stop = typeof watchId === 'string' ? watches.get(watchId) : undefined;
      if (!stop) {
        throw new DlmError('INVALID_PARAMS', 'watchId does not name a watch of this session', {
          field: 'watchId',
        });
      }
      watches.delete(watchId as string);
      stop();
      return {};
    },
  };
}
