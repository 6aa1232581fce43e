/**
 * The acquires in flight through this server, and the grants core's watch reported that may be
 * theirs. A backend tells its watchers of a grant as soon as it makes it, and the acquire's own
 * answer (with the lease, and how long it waited) comes later: on the journaled embedded backend
 * only after the grant's record is on disk, on a networked one in whatever order two connections
 * deliver. So the feed holds such a grant back until the acquire that may have made it settles,
 * rather than for a guessed while: the acquire either reported it, or it was someone else's.
 */
export interface PendingGrants<T> {
  /**
   * An acquire of `names` for `owner` started; call `settled` when it ended either way. It
   * returns the grants held back for those names that no acquire in flight may claim now.
   */
  start(names: readonly string[], owner: string): { settled(): T[] };
  /** Whether an acquire in flight may have made a grant of `name` to `owner` (any, unknown). */
  covers(name: string, owner: string | undefined): boolean;
  /** Holds back a grant of `name` with `token` until the acquires that may claim it settle. */
  hold(name: string, token: bigint, owner: string | undefined, grant: T): void;
  /** Forgets one grant held back (reported, or ended); all of `name`'s without `token`. */
  drop(name: string, token?: bigint): void;
  clear(): void;
}

interface Held<T> {
  name: string;
  owner: string | undefined;
  grant: T;
}

function keyOf(name: string, token: bigint): string {
  return `${token}\u0000${name}`;
}

export function createPendingGrants<T>(): PendingGrants<T> {
  /** Acquires in flight, by name, then owner. Empty maps are deleted: one entry per acquire. */
  const inFlight = new Map<string, Map<string, number>>();
  const held = new Map<string, Held<T>>();

  function covers(name: string, owner: string | undefined): boolean {
    const owners = inFlight.get(name);
    if (owners === undefined) return false;
    return owner === undefined || owners.has(owner);
  }

  function count(name: string, owner: string, by: 1 | -1): void {
    const owners = inFlight.get(name) ?? new Map<string, number>();
    const next = (owners.get(owner) ?? 0) + by;
    if (next > 0) owners.set(owner, next);
    else owners.delete(owner);
    if (owners.size > 0) inFlight.set(name, owners);
    else inFlight.delete(name);
  }

  return {
    start(names, owner) {
      for (const name of names) count(name, owner, 1);
      let done = false;
      return {
        settled() {
          if (done) return [];
          done = true;
          for (const name of names) count(name, owner, -1);
          const released: T[] = [];
          for (const [key, grant] of held) {
            if (!names.includes(grant.name) || covers(grant.name, grant.owner)) continue;
            held.delete(key);
            released.push(grant.grant);
          }
          return released;
        },
      };
    },
    covers,
    hold(name, token, owner, grant) {
      held.set(keyOf(name, token), { name, owner, grant });
    },
    drop(name, token) {
      if (token !== undefined) {
        held.delete(keyOf(name, token));
        return;
      }
      for (const [key, grant] of held) if (grant.name === name) held.delete(key);
    },
    clear() {
      inFlight.clear();
      held.clear();
    },
  };
}
