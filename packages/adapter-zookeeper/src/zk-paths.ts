/**
 * Where things live under the adapter's root (`/dlm` by default):
 *
 * - `<root>/clock`: touched (setData) to read ZooKeeper's time from the reply's `mtime`, and
 *   to learn the zxid of a multi-op it is part of.
 * - `<root>/locks/<encoded name>`: one persistent node per lock name. Its data is the last
 *   "end marker" (`released:<token>`, `revoked:<token>`, `expired:<token>`), written in the
 *   same multi-op that deleted a holder, so watchers can tell why a holder went away.
 * - `<root>/locks/<encoded name>/<attempt id>-lock-<sequence>`: ephemeral sequential nodes,
 *   one per contender; the lowest sequence holds the lock. The attempt id in the name lets a
 *   create whose reply was lost be found again (ZOOKEEPER-1262).
 */

export interface LockPaths {
  root: string;
  clock: string;
  locks: string;
  parent(name: string): string;
  /** The path prefix a new contender node is created with (ZooKeeper appends the sequence). */
  contender(name: string, attemptId: string): string;
  /** The lock name a parent's child list belongs to, from the parent's node name. */
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

export function lockPaths(root: string): LockPaths {
  const base = root.endsWith('/') ? root.slice(0, -1) : root;
  const locks = `${base}/locks`;
  return {
    root: base,
    clock: `${base}/clock`,
    locks,
    parent: (name) => `${locks}/${encodeName(name)}`,
    contender: (name, attemptId) => `${locks}/${encodeName(name)}/${attemptId}-lock-`,
    nameOf: (encoded) => decodeURIComponent(encoded),
  };
}

const SEQUENCE = /-lock-(\d{10})$/;

/** Contender nodes among `children`, lowest sequence (the holder) first. */
export function contenders(children: string[]): string[] {
  return children
    .filter((child) => SEQUENCE.test(child))
    .sort((a, b) => sequenceOf(a) - sequenceOf(b));
}

function sequenceOf(child: string): number {
  return Number(SEQUENCE.exec(child)?.[1] ?? Number.NaN);
}
