/**
 * Where things live under the adapter's root (`/dlm` by default):
 *
 * - `<root>/clock`: touched (setData) to read ZooKeeper's exact time from the reply's `mtime`.
 * - `<root>/locks/<encoded name>`: one persistent node per lock name (the "name node"). After
 *   an end its data is the end marker (`released:<token>`, `revoked:<token>`,
 *   `expired:<token>`), written in the same multi-op that deleted the holder; after a grant it
 *   is the holder's owner and attempt id (and the last end marker), written in the multi-op
 *   that created the holder, whose token is then the name node's mzxid (see zk-data.ts). So
 *   watchers learn every change of holder, and why, from this one node. Its data *version*
 *   guards grants: every multi-op that creates a holder also rewrites the name node at the
 *   version it read, so two contenders that both saw the lock free cannot both create one.
 * - `<name node>/<attempt id>-lock-<sequence>`: an exclusive holder, persistent (ephemeral with
 *   the `ephemeral` option); it is then the only holder. Sequential, so that every lease has a
 *   path of its own and a versioned delete of an old lease can never hit a newer one.
 * - `<name node>/<attempt id>-s<limit>-lock-<sequence>`: a shared holder (up to `limit` of them,
 *   all with the same limit). The mode and limit are in the name so that one `getChildren`
 *   tells every holder's and waiter's mode (Curator's read-write lock puts them in the name too).
 * - `<name node>/<attempt id>-wait-<sequence>`, `<attempt id>-s<limit>-wait-<sequence>`: one
 *   ephemeral sequential node per waiter (exclusive, shared); the sequence orders the queue.
 *   Both end in `-wait-<sequence>` (and holders in `-lock-<sequence>`), so a version that does
 *   not know shared modes still sees every entry (it takes a shared one for exclusive).
 *
 * - `<root>/asks/<encoded name>`: a name's release requests, one rewrite of its data each
 *   (zk-asks.ts); made by the first request, kept after (a few bytes per name ever asked).
 *
 * The attempt id in a child's name lets a create whose reply was lost be found again
 * (ZOOKEEPER-1262).
 */

export interface LockPaths {
  root: string;
  clock: string;
  locks: string;
  parent(name: string): string;
  /** The path prefix a new holder node is created with (ZooKeeper appends the sequence). */
  holder(name: string, attemptId: string, spec?: EntrySpec): string;
  /** The path prefix a new waiter node is created with. */
  waiter(name: string, attemptId: string, spec?: EntrySpec): string;
  /** The node a name's release requests rewrite. */
  ask(name: string): string;
  /** The lock name a name node belongs to, from the name node's own name. */
  nameOf(encoded: string): string;
}

/**
 * Lock names may hold any character but control characters; ZooKeeper paths may not hold `/`
 * inside a node name, `.`/`..` as a name, or many code points. Percent-encoding (with `.`
 * encoded too) maps every name to a distinct plain-ASCII node name.
 */
function encodeName(name: string): string {
  return encodeURIComponent(name).replaceAll('.', '%2E');
}

/** A holder's or waiter's mode and limit (exclusive: limit 1). */
export interface EntrySpec {
  mode: 'exclusive' | 'shared';
  limit: number;
  /**
   * A lease's cap on holding (exclusive only; absent: none), written in its holder node's data:
   * the lease ends no later than the node's `ctime` plus this, on ZooKeeper's clock.
   */
  maxHoldMs?: number | undefined;
}

export const EXCLUSIVE: EntrySpec = { mode: 'exclusive', limit: 1 };

const tag = (spec: EntrySpec | undefined) => (spec?.mode === 'shared' ? `-s${spec.limit}` : '');

export function lockPaths(root: string): LockPaths {
  const base = root.endsWith('/') ? root.slice(0, -1) : root;
  const locks = `${base}/locks`;
  const parent = (name: string) => `${locks}/${encodeName(name)}`;
  return {
    root: base,
    clock: `${base}/clock`,
    locks,
    parent,
    holder: (name, attemptId, spec) => `${parent(name)}/${attemptId}${tag(spec)}-lock-`,
    waiter: (name, attemptId, spec) => `${parent(name)}/${attemptId}${tag(spec)}-wait-`,
    ask: (name) => `${base}/asks/${encodeName(name)}`,
    nameOf: (encoded) => decodeURIComponent(encoded),
  };
}

const HOLDER = /-lock-(\d{10})$/;
const WAITER = /-wait-(\d{10})$/;

function sorted(children: string[], pattern: RegExp): string[] {
  const sequence = (child: string) => Number(pattern.exec(child)?.[1] ?? Number.NaN);
  return children.filter((child) => pattern.test(child)).sort((a, b) => sequence(a) - sequence(b));
}

/** Holder nodes among `children`, lowest sequence first (one exclusive, or 1..limit shared). */
export function holders(children: string[]): string[] {
  return sorted(children, HOLDER);
}

/** Waiter nodes among `children`, in queue order. */
export function waiters(children: string[]): string[] {
  return sorted(children, WAITER);
}

const SHARED = /-s(\d+)-(?:lock|wait)-\d{10}$/;

/** The mode and limit a holder's or waiter's node name records. */
export function specOf(child: string): EntrySpec {
  const shared = SHARED.exec(child);
  return shared ? { mode: 'shared', limit: Number(shared[1]) } : EXCLUSIVE;
}
