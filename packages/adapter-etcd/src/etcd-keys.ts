/**
 * Where things live under the adapter's prefix (`dlm/` by default):
 *
 * - `<prefix>lock/<name>`: the lock key; its create revision is the fencing token.
 * - `<prefix>queue/<name>\0<id>`: one key per waiter in the name's queue, ordered by create
 *   revision. Lock names never hold control characters, so the NUL after the name keeps
 *   `a`'s queue apart from `a/b`'s (a plain `/` would make one a prefix of the other).
 * - `<prefix>event`: written in the same transaction as a release or revocation, so watchers
 *   can tell those deletions from lease expiries.
 */
export interface EtcdKeys {
  readonly prefix: string;
  readonly lockPrefix: string;
  readonly queuePrefix: string;
  readonly markerKey: string;
  lock(name: string): Buffer;
  /** Every waiter key of `name` starts with this. */
  queue(name: string): Buffer;
  /** The lock name a queue key belongs to, or undefined for other keys. */
  nameOfQueueKey(key: string): string | undefined;
}

export function etcdKeys(prefix: string): EtcdKeys {
  const lockPrefix = `${prefix}lock/`;
  const queuePrefix = `${prefix}queue/`;
  return {
    prefix,
    lockPrefix,
    queuePrefix,
    markerKey: `${prefix}event`,
    lock: (name) => Buffer.from(lockPrefix + name),
    queue: (name) => Buffer.from(`${queuePrefix}${name}\0`),
    nameOfQueueKey(key) {
      if (!key.startsWith(queuePrefix)) return undefined;
      const end = key.indexOf('\0', queuePrefix.length);
      return end < 0 ? undefined : key.slice(queuePrefix.length, end);
    },
  };
}

/** The smallest key greater than every key that starts with `prefix` (etcd's range_end). */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i -= 1) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}
