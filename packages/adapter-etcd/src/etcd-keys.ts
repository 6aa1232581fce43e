/**
 * Where things live under the adapter's prefix (`dlm/` by default):
 *
 * - `<prefix>lock/<name>`: the lock key; its create revision is the fencing token.
 * - `<prefix>queue/<name>\0<id>`: one key per waiter in the name's queue, ordered by create
 *   revision. Lock names never hold control characters, so the NUL after the name keeps
 *   `a`'s queue apart from `a/b`'s (a plain `/` would make one a prefix of the other).
 * - `<prefix>shared/<name>\0k<keyHash>` (or `\0o<owner>` for a lease granted without a key
 *   hash): one key per shared holder, on that holder's own lease; its create revision is that
 *   holder's token. Named by the key hash, so that a release or extend (which knows the token
 *   and the hash, not the owner) finds its key in the same transaction that checks it, and a
 *   re-acquire by the same owner and key lands on the same key (same create revision, so same
 *   token). The NUL keeps `a`'s holders apart from `a/b`'s, as for the queue.
 * - `<prefix>delay/<name>`: the name's lock-delay (etcd-delay.ts), put with an exclusive grant
 *   that asks for one, on a lease of its own that outlives the lock's lease by the delay.
 * - `<prefix>event`: written in the same transaction as a release or revocation, so watchers
 *   can tell those deletions from lease expiries.
 * - `<prefix>ask`: put by a release request (`askValue`), which every watch of the prefix hears;
 *   one key overwritten each time, so asking leaves nothing behind.
 */
export interface EtcdKeys {
  readonly prefix: string;
  readonly lockPrefix: string;
  readonly queuePrefix: string;
  readonly sharedPrefix: string;
  readonly delayPrefix: string;
  readonly markerKey: string;
  readonly askKey: string;
  lock(name: string): Buffer;
  /** The lock-delay key of `name`. */
  delay(name: string): Buffer;
  /** Every shared holder key of `name` starts with this. */
  shared(name: string): Buffer;
  /** The shared holder key of this owner and key hash. */
  sharedHolder(name: string, owner: string, keyHash: string | undefined): Buffer;
  /** The lock name a shared holder key belongs to, or undefined for other keys. */
  nameOfSharedKey(key: string): string | undefined;
  /** Every waiter key of `name` starts with this. */
  queue(name: string): Buffer;
  /** The lock name a queue key belongs to, or undefined for other keys. */
  nameOfQueueKey(key: string): string | undefined;
}

export function etcdKeys(prefix: string): EtcdKeys {
  const lockPrefix = `${prefix}lock/`;
  const queuePrefix = `${prefix}queue/`;
  const sharedPrefix = `${prefix}shared/`;
  const delayPrefix = `${prefix}delay/`;
  const nameAfter = (start: string, key: string) => {
    if (!key.startsWith(start)) return undefined;
    const end = key.indexOf('\0', start.length);
    return end < 0 ? undefined : key.slice(start.length, end);
  };
  return {
    prefix,
    lockPrefix,
    queuePrefix,
    sharedPrefix,
    delayPrefix,
    markerKey: `${prefix}event`,
    askKey: `${prefix}ask`,
    lock: (name) => Buffer.from(lockPrefix + name),
    delay: (name) => Buffer.from(delayPrefix + name),
    queue: (name) => Buffer.from(`${queuePrefix}${name}\0`),
    shared: (name) => Buffer.from(`${sharedPrefix}${name}\0`),
    sharedHolder: (name, owner, keyHash) =>
      Buffer.from(
        keyHash === undefined
          ? `${sharedPrefix}${name}\0o${owner}`
          : `${sharedPrefix}${name}\0k${keyHash}`,
      ),
    nameOfQueueKey: (key) => nameAfter(queuePrefix, key),
    nameOfSharedKey: (key) => nameAfter(sharedPrefix, key),
  };
}

/** The value of the ask key for a release request of `name`. */
export function askValue(name: string, reason: string | undefined): Buffer {
  return Buffer.from(JSON.stringify(reason === undefined ? { n: name } : { n: name, r: reason }));
}

/** The release request an ask key's value carries, or undefined when it is not one. */
export function parseAsk(value: Buffer): { name: string; reason?: string } | undefined {
  try {
    const { n, r } = JSON.parse(value.toString()) as { n?: unknown; r?: unknown };
    if (typeof n !== 'string') return undefined;
    return typeof r === 'string' ? { name: n, reason: r } : { name: n };
  } catch {
    return undefined;
  }
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
