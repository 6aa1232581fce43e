import { randomInt } from 'node:crypto';
/**
 * How lock names become Redis keys. A name may hold any non-control Unicode, `{`, `}` and `:`
 * included, so it is hex-encoded (UTF-8 bytes): the encoding is injective, contains no brace
 * (the hash tag `{…}` stays valid, so a name's lock, fence and queue keys share one Redis
 * Cluster slot), and a name prefix maps to a key prefix (`list(prefix)` can SCAN with MATCH).
 */

export interface NameKeys {
  /** Holds `<token>:<owner>` with the lease as its PX expiry. */
  lock: string;
  /** The name's last token; expires the lease plus the retention margin after its last grant. */
  fence: string;
  /** The fair queue's entry ids, scored by the name's sequence (see QUEUE_JOIN). */
  queue: string;
  /** The same ids, scored by when each stops counting (server ms). */
  queueEnds: string;
  /** The sequence that orders the queue's entries. */
  queueSeq: string;
  /**
   * Shared holders (see redis-scripts.ts): a hash of token → `<key hash>:<owner>`, `=<key
   * hash>:<owner>` → token and `limit`; the scripts derive it (and the two below) from `lock`.
   */
  holders: string;
  /** The shared holders' tokens, scored by their deadlines (server ms). */
  holderEnds: string;
  /** Before a token: a shared holder's marker key, whose PX is that holder's lease. */
  holderMark: string;
  /**
   * The name's lock-delay: its value is the delay (ms) of the exclusive lease that keeps it, its
   * PX that lease's end plus the delay (see redis-scripts.ts). Derived by the scripts, like the
   * holders' keys.
   */
  delay: string;
  /** The name's hex form, as carried in event messages. */
  hex: string;
  /** The pub/sub channel the name's events are published on (`nameChannel`). */
  events: string;
}

// Names repeat (a lock is taken again and again): remembering recent encodings spares a Buffer
// per call. Cleared when full rather than kept in LRU order: refilling it is cheap.
const encoded = new Map<string, string>();
const ENCODED_MAX = 4_096;

export function encodeName(name: string): string {
  let hex = encoded.get(name);
  if (hex === undefined) {
    hex = Buffer.from(name, 'utf8').toString('hex');
    if (encoded.size >= ENCODED_MAX) encoded.clear();
    encoded.set(name, hex);
  }
  return hex;
}

export function decodeName(hex: string): string {
  return Buffer.from(hex, 'hex').toString('utf8');
}

/** The keys of `name` under `prefix`: its lock, fence and queue keys (one hash slot). */
export function nameKeys(prefix: string, name: string): NameKeys {
  const hex = encodeName(name);
  const tag = `${prefix}{${hex}}`;
  return {
    lock: `${tag}:lock`,
    fence: `${tag}:fence`,
    queue: `${tag}:queue`,
    queueEnds: `${tag}:queue-ends`,
    queueSeq: `${tag}:queue-seq`,
    holders: `${tag}:holders`,
    holderEnds: `${tag}:holder-ends`,
    holderMark: `${tag}:holder:`,
    delay: `${tag}:delay`,
    hex,
    events: nameChannel(prefix, hex),
  };
}

/**
 * A release request's message on the name's event channel: `asked <hex name> <request id> [+reason]`
 * (the id tells Redlock's copies of one request apart).
 */
export function askedMessage(hex: string, id: bigint, reason: string | undefined): string {
  return `asked ${hex} ${id} ${reason === undefined ? '' : `+${reason}`}`;
}

/** A fresh release request id (48 random bits: copies of one request share it). */
export function newRequestId(): bigint {
  return BigInt(randomInt(1, 2 ** 48));
}

/**
 * The pub/sub channel of one name's events (given as its hex form): grants, releases,
 * revocations, expiries found by a script, release requests and queue departures, each
 * published once (PUBLISH; in a Cluster the bus carries it to every node). Only services that
 * hold, wait on or watch the name subscribe to it (event-channels.ts). Its hash tag is the
 * name's keys', should sharded pub/sub (SPUBLISH, whose channel must be in the script's slot)
 * ever replace PUBLISH.
 */
export function nameChannel(prefix: string, hex: string): string {
  return `${prefix}events:{${hex}}`;
}

const HEX = /^[0-9a-f]*$/;

/** The lock name a lock key stands for, or undefined when the key is not one of ours. */
export function nameOfLockKey(prefix: string, key: string): string | undefined {
  if (!key.startsWith(prefix) || !key.endsWith('}:lock')) return undefined;
  const inner = key.slice(prefix.length, -'}:lock'.length);
  if (!inner.startsWith('{')) return undefined;
  const hex = inner.slice(1);
  if (hex.length === 0 || hex.length % 2 !== 0 || !HEX.test(hex)) return undefined;
  return decodeName(hex);
}

/** The name and token of a shared holder's marker key, or undefined when not one of ours. */
export function holderOfMarkKey(
  prefix: string,
  key: string,
): { name: string; token: bigint } | undefined {
  const at = key.lastIndexOf('}:holder:');
  if (at < 0 || !key.startsWith(`${prefix}{`)) return undefined;
  const hex = key.slice(prefix.length + 1, at);
  const digits = key.slice(at + '}:holder:'.length);
  if (hex.length === 0 || hex.length % 2 !== 0 || !HEX.test(hex)) return undefined;
  if (!/^[0-9]+$/.test(digits)) return undefined;
  return { name: decodeName(hex), token: BigInt(digits) };
}

/** The name a shared holders key stands for, or undefined when the key is not one of ours. */
export function nameOfHoldersKey(prefix: string, key: string): string | undefined {
  if (!key.endsWith('}:holders')) return undefined;
  return nameOfLockKey(prefix, `${key.slice(0, -'holders'.length)}lock`);
}

/** Escapes Redis glob metacharacters so `text` matches only itself in MATCH/PSUBSCRIBE. */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** A SCAN MATCH pattern for the lock keys of every name starting with `namePrefix`. */
export function lockKeyPattern(prefix: string, namePrefix: string): string {
  return `${globEscape(prefix)}{${encodeName(namePrefix)}*}:lock`;
}

/** A SCAN MATCH pattern for the shared holders keys of every name starting with `namePrefix`. */
export function holdersKeyPattern(prefix: string, namePrefix: string): string {
  return `${globEscape(prefix)}{${encodeName(namePrefix)}*}:holders`;
}

/** The keyspace-notification pattern for our lock keys in database `db`. */
export function keyspacePattern(prefix: string, db: number): string {
  return `__keyspace@${db}__:${globEscape(prefix)}{*}:lock`;
}

/** The keyspace-notification pattern for our shared holders' marker keys in database `db`. */
export function holderKeyspacePattern(prefix: string, db: number): string {
  return `__keyspace@${db}__:${globEscape(prefix)}{*}:holder:*`;
}

export function keyspaceChannelPrefix(db: number): string {
  return `__keyspace@${db}__:`;
}
