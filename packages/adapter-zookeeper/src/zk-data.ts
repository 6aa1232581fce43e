import type { Stat } from 'node-zookeeper-client';
import { type EntrySpec, EXCLUSIVE } from './zk-paths.js';

export type EndReason = 'released' | 'revoked' | 'expired';

/** A lease that ended, as its end marker records it. */
export interface EndMarker {
  reason: EndReason;
  token: bigint;
}

/** The holder a name node records: its grant was the name node's last write. */
export interface RecordedHolder {
  /** The grant's zxid (the name node's mzxid): the holder node's czxid, the fencing token. */
  token: bigint;
  owner: string;
  /** The attempt id at the start of the holder node's name. */
  attemptId: string;
  /** The holder node is ephemeral: it may vanish with its session, without a name-node write. */
  ephemeral: boolean;
  mode: EntrySpec['mode'];
}

/** What a name node says: who holds the lock (if anyone), and why the lease before ended. */
export interface NameRecord {
  holder: RecordedHolder | undefined;
  end: EndMarker | undefined;
  /**
   * The last write was a shared grant or the end of a shared holder: other holders may hold
   * too, so only the children tell who holds (`holder`, if any, is the newest of them).
   */
  shared: boolean;
}

/** `<reason>:<token>`, and for an exclusive lease with a lock-delay `:x<deadline>:d<delay>`. */
const MARKER = /^(released|revoked|expired):(\d+)(?::x(\d+):d(\d+))?$/;

export function zxid(value: Buffer): bigint {
  return value.readBigInt64BE(0);
}

export const mtimeOf = (stat: Stat) => Number(stat.mtime.readBigInt64BE(0));

/**
 * A holder node's data: its owner, lease length (ZooKeeper's mtime says from when), the lease
 * key's hash (`k`; absent for a lease granted without one, or by an older version), for a
 * shared holder its mode and limit (`m`, `l`; also in the node's name), and a cap on holding
 * (`h`, ms after the node's ctime; absent: none). Every reader ends the lease at
 * `min(mtime + t, ctime + h)`, on ZooKeeper's own clock: no extend can move it past the cap. A release or extend
 * compares the hash as read at the node's data version and then writes or deletes at exactly
 * that version, so the check and the write are one step.
 */
export function parseData(
  data: Buffer,
):
  | ({ owner: string; ttlMs: number; keyHash: string | undefined; lockDelayMs: number } & EntrySpec)
  | undefined {
  try {
    const parsed = JSON.parse(data.toString('utf8')) as {
      o?: unknown;
      t?: unknown;
      k?: unknown;
      m?: unknown;
      l?: unknown;
      d?: unknown;
      h?: unknown;
    };
    if (typeof parsed.o === 'string' && typeof parsed.t === 'number') {
      const shared = parsed.m === 's' && typeof parsed.l === 'number';
      return {
        owner: parsed.o,
        ttlMs: parsed.t,
        keyHash: typeof parsed.k === 'string' ? parsed.k : undefined,
        lockDelayMs: typeof parsed.d === 'number' && parsed.d > 0 ? parsed.d : 0,
        ...(shared ? { mode: 'shared', limit: parsed.l as number } : EXCLUSIVE),
        ...(typeof parsed.h === 'number' ? { maxHoldMs: parsed.h } : {}),
      };
    }
  } catch {}
  return undefined;
}

export function leaseData(
  owner: string,
  ttlMs: number,
  keyHash: string | undefined,
  spec: EntrySpec = EXCLUSIVE,
  /** The lease's lock-delay (`d`), fixed at its grant: extends and refreshes keep it. */
  lockDelayMs = 0,
): Buffer {
  return Buffer.from(
    JSON.stringify({
      o: owner,
      t: ttlMs,
      ...(keyHash === undefined ? {} : { k: keyHash }),
      ...(lockDelayMs > 0 ? { d: lockDelayMs } : {}),
      ...(spec.mode === 'shared' ? { m: 's', l: spec.limit } : {}),
      ...(spec.maxHoldMs === undefined ? {} : { h: spec.maxHoldMs }),
    }),
  );
}

/** An exclusive lease's lock-delay, as its end records it: its deadline and its delay. */
export interface EndDelay {
  /** The lease's end by expiry on ZooKeeper's clock (its node's mtime + its TTL). */
  deadlineMs: number;
  delayMs: number;
}

/**
 * The name node's data after an end: the plain marker, `released:<token>` (and so on), with the
 * lease's deadline and lock-delay when it had one (`:x<deadline>:d<delay>`, see `delayEndOf`);
 * after the end of a shared holder (others may still hold), the marker flagged shared, so that a
 * watcher looks at the children.
 */
export function endData(
  reason: EndReason,
  token: bigint,
  shared = false,
  delay?: EndDelay,
): Buffer {
  const marker = delay
    ? `${reason}:${token}:x${Math.ceil(delay.deadlineMs)}:d${delay.delayMs}`
    : `${reason}:${token}`;
  return Buffer.from(shared ? JSON.stringify({ e: marker, s: 1 }) : marker);
}

/**
 * When the name's lock-delay ends on ZooKeeper's clock, from its name node (`mtimeMs`: the time
 * of its last write); undefined when it has none. Only a name node whose last write was the end
 * of an exclusive lease with a delay (a plain marker with `x` and `d`) has one: the lease ended
 * at its deadline, or earlier when it was revoked (the revocation wrote the node: its mtime), and
 * the delay runs from that end. A release before the deadline ends it with none; a release after
 * it comes too late: the lease had already ended by expiry.
 */
export function delayEndOf(node: { data: Buffer; mtimeMs: number }): number | undefined {
  const marker = MARKER.exec(node.data.toString('utf8'));
  if (!marker?.[3] || !marker[4]) return undefined;
  const deadlineMs = Number(marker[3]);
  if (marker[1] === 'released' && node.mtimeMs < deadlineMs) return undefined;
  return Math.min(deadlineMs, node.mtimeMs) + Number(marker[4]);
}

function parseMarker(text: string | undefined): EndMarker | undefined {
  const marker = text === undefined ? null : MARKER.exec(text);
  return marker ? { reason: marker[1] as EndReason, token: BigInt(marker[2]!) } : undefined;
}

/**
 * The name node's data after a grant: the holder's owner and attempt id (so that watchers learn
 * the new holder from this one node, its token being the node's mzxid), and the end marker it
 * replaces (so that a watcher that missed the end between two reads still learns its reason).
 */
export function grantData(
  previous: Buffer,
  owner: string,
  attemptId: string,
  ephemeral: boolean,
  shared = false,
): Buffer {
  const text = previous.toString('utf8');
  const end = MARKER.test(text) ? text : parseJson(text)?.e;
  return Buffer.from(
    JSON.stringify({
      h: owner,
      a: attemptId,
      ...(ephemeral ? { x: 1 } : {}),
      ...(shared ? { m: 's' } : {}),
      ...(typeof end === 'string' ? { e: end } : {}),
    }),
  );
}

type NameJson = { h?: unknown; a?: unknown; x?: unknown; e?: unknown; m?: unknown; s?: unknown };

function parseJson(text: string): NameJson | undefined {
  if (!text.startsWith('{')) return undefined;
  try {
    return JSON.parse(text) as NameJson;
  } catch {
    return undefined;
  }
}

/**
 * Reads a name node. Only grants and ends write it, each in the same multi-op as the holder
 * change, so its last write tells the current holder — except an ephemeral holder that vanished
 * with its session (flagged, for the reader to check), and data written by something else (an
 * older adapter version copied the end marker forward on a grant): those read as "no holder
 * recorded", and a reader that must be sure looks at the children.
 */
export function parseNameNode(data: Buffer, stat: Stat): NameRecord {
  const text = data.toString('utf8');
  const plain = parseMarker(text);
  if (plain) return { holder: undefined, end: plain, shared: false };
  const json = parseJson(text);
  if (!json) return { holder: undefined, end: undefined, shared: false };
  const end = parseMarker(typeof json.e === 'string' ? json.e : undefined);
  const shared = json.m === 's' || json.s === 1;
  if (typeof json.h !== 'string' || typeof json.a !== 'string') {
    return { holder: undefined, end, shared };
  }
  return {
    holder: {
      token: zxid(stat.mzxid),
      owner: json.h,
      attemptId: json.a,
      ephemeral: json.x === 1,
      mode: shared ? 'shared' : 'exclusive',
    },
    end,
    shared,
  };
}

/** The holder a name node records (owner and attempt id), if it records one. */
export function recordedHolder(data: Buffer): { owner: string; attemptId: string } | undefined {
  const json = parseJson(data.toString('utf8'));
  return typeof json?.h === 'string' && typeof json.a === 'string'
    ? { owner: json.h, attemptId: json.a }
    : undefined;
}
