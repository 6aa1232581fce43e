import { crc32 } from 'node:zlib';

/**
 * The journal's on-disk format. A file starts with an 8-byte magic, then records, each framed
 * as `u32 LE payload length | u32 LE crc32(payload) | payload`, the payload a JSON array.
 * The length and checksum let recovery tell a complete record from a torn or corrupt one: it
 * keeps the longest valid prefix and stops at the first bad frame.
 *
 * Lease times are written as the remaining TTL plus the wall-clock time of writing, because the
 * monotonic clock restarts with the process.
 *
 * An exclusive grant is `['g', name, owner, token, ttlMs, wallMs, keyHash?]` (the format of every
 * version); a shared grant is `['s', name, owner, token, ttlMs, wallMs, limit, keyHash?]`, a
 * type older versions do not know, so a journal written before shared modes reads unchanged.
 * A name's lock-delay is `['d', name, token, ms, wallMs, delayMs]`: nobody is granted the name
 * until `ms` after `wallMs` (0: none), kept by the lease `token` whose delay is `delayMs`, written whenever it changes (a grant or extend of a lease with a
 * lock-delay: until its end plus the delay; a release: none; a revocation: the delay from then).
 * A lease's cap on holding is `['c', name, token, capWallMs]`, written with its grant: no extend
 * keeps the lease past the wall-clock time `capWallMs` (a restart counts the cap on the wall clock,
 * as it does the lease's time).
 */

export const JOURNAL_MAGIC = Buffer.from('DLMJRNL1', 'latin1');
const FRAME_HEADER_BYTES = 8;
/** No record comes close: names are ≤ 256 bytes. A larger length is corruption. */
const MAX_PAYLOAD_BYTES = 64 * 1024;

export type JournalRecord =
  | {
      type: 'grant';
      name: string;
      owner: string;
      token: bigint;
      ttlMs: number;
      wallMs: number;
      /** The lease key's hash (never the key); absent in journals written before it existed. */
      keyHash?: string | undefined;
      /** Present: a `shared` holder, with the limit its name's holders agreed on. */
      limit?: number | undefined;
    }
  | { type: 'extend'; name: string; token: bigint; ttlMs: number; wallMs: number }
  /** The lease with `token` ended: released, revoked or expired. */
  | { type: 'end'; name: string; token: bigint }
  /** Nobody is granted `name` until `ms` after `wallMs` (its lock-delay; 0: none). */
  | { type: 'delay'; name: string; token: bigint; ms: number; wallMs: number; delayMs: number }
  /** The lease `token` of `name` is held no later than `capWallMs` (its cap on holding). */
  | { type: 'cap'; name: string; token: bigint; capWallMs: number }
  /** Tokens up to and including `token` may have been handed out. */
  | { type: 'high-water'; token: bigint };

/** A record's payload text; framing happens per batch in `frameRecords`. */
export function encodeRecord(record: JournalRecord): string {
  return JSON.stringify(fieldsOf(record));
}

/** A record as the array its payload is: its type's letter, then its fields in order. */
function fieldsOf(record: JournalRecord): Array<string | number> {
  switch (record.type) {
    case 'grant': {
      // A limit makes it a shared grant ('s'), its limit written before the optional key hash.
      const { name, owner, token, ttlMs, wallMs, limit, keyHash } = record;
      const shared = limit === undefined ? [] : [limit];
      const key = keyHash === undefined ? [] : [keyHash];
      const type = limit === undefined ? 'g' : 's';
      return [type, name, owner, token.toString(), ttlMs, wallMs, ...shared, ...key];
    }
    case 'extend':
      return ['x', record.name, record.token.toString(), record.ttlMs, record.wallMs];
    case 'end':
      return ['e', record.name, record.token.toString()];
    case 'high-water':
      return ['h', record.token.toString()];
    case 'cap':
      return ['c', record.name, record.token.toString(), record.capWallMs];
    case 'delay': {
      const { name, token, ms, wallMs, delayMs } = record;
      return ['d', name, token.toString(), ms, wallMs, delayMs];
    }
  }
}

/** Frames payloads into one buffer, so a batch is one write. */
export function frameRecords(payloads: readonly string[], withMagic = false): Buffer {
  let total = withMagic ? JOURNAL_MAGIC.length : 0;
  for (const payload of payloads) total += FRAME_HEADER_BYTES + Buffer.byteLength(payload, 'utf8');
  const buffer = Buffer.allocUnsafe(total);
  let offset = 0;
  if (withMagic) offset += JOURNAL_MAGIC.copy(buffer, 0);
  for (const payload of payloads) {
    const start = offset + FRAME_HEADER_BYTES;
    const length = buffer.write(payload, start, 'utf8');
    buffer.writeUInt32LE(length, offset);
    buffer.writeUInt32LE(crc32(buffer.subarray(start, start + length)), offset + 4);
    offset = start + length;
  }
  return buffer;
}

export interface ParsedJournal {
  records: JournalRecord[];
  /** Bytes of the file that hold the magic and complete, valid records. */
  validBytes: number;
  /** Why parsing stopped before the end of the file; undefined when the whole file is valid. */
  problem?: string;
}

/** Reads records until the end of the file or the first bad frame. Never throws. */
export function parseJournal(data: Buffer): ParsedJournal {
  const records: JournalRecord[] = [];
  if (data.length === 0) return { records, validBytes: 0 };
  if (
    data.length < JOURNAL_MAGIC.length ||
    !data.subarray(0, JOURNAL_MAGIC.length).equals(JOURNAL_MAGIC)
  ) {
    return { records, validBytes: 0, problem: 'the file does not start with the journal magic' };
  }
  let offset = JOURNAL_MAGIC.length;
  while (offset < data.length) {
    if (data.length - offset < FRAME_HEADER_BYTES) {
      return { records, validBytes: offset, problem: 'a truncated record header' };
    }
    const length = data.readUInt32LE(offset);
    const checksum = data.readUInt32LE(offset + 4);
    if (length > MAX_PAYLOAD_BYTES) {
      return { records, validBytes: offset, problem: `an impossible record length (${length})` };
    }
    const start = offset + FRAME_HEADER_BYTES;
    if (data.length - start < length) {
      return { records, validBytes: offset, problem: 'a truncated record' };
    }
    const payload = data.subarray(start, start + length);
    if (crc32(payload) !== checksum) {
      return { records, validBytes: offset, problem: 'a record whose checksum does not match' };
    }
    const record = decodePayload(payload.toString('utf8'));
    if (record === undefined) {
      return { records, validBytes: offset, problem: 'a record that does not decode' };
    }
    records.push(record);
    offset = start + length;
  }
  return { records, validBytes: offset };
}

const TOKEN = /^[1-9][0-9]{0,18}$/;

const isText = (x: unknown): x is string => typeof x === 'string' && x.length > 0;
const isToken = (x: unknown): x is string => typeof x === 'string' && TOKEN.test(x);
const isMs = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x >= 0;
const isLimit = (x: unknown): x is number =>
  typeof x === 'number' && Number.isSafeInteger(x) && x >= 1;

function decodePayload(text: string): JournalRecord | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!Array.isArray(value)) return undefined;
  const [type, ...fields] = value as unknown[];
  const [a, b, c, d] = fields;
  switch (type) {
    case 'g':
      return decodeGrant(fields, false);
    case 's':
      return decodeGrant(fields, true);
    case 'x':
      if (isText(a) && isToken(b) && isMs(c) && isMs(d)) {
        return { type: 'extend', name: a, token: BigInt(b), ttlMs: c, wallMs: d };
      }
      return undefined;
    case 'e':
      if (isText(a) && isToken(b)) return { type: 'end', name: a, token: BigInt(b) };
      return undefined;
    case 'h':
      if (isToken(a)) return { type: 'high-water', token: BigInt(a) };
      return undefined;
    case 'd': {
      const delayMs = fields[4];
      if (isText(a) && isToken(b) && isMs(c) && isMs(d) && isMs(delayMs)) {
        return { type: 'delay', name: a, token: BigInt(b), ms: c, wallMs: d, delayMs };
      }
      return undefined;
    }
    case 'c':
      if (isText(a) && isToken(b) && isMs(c)) {
        return { type: 'cap', name: a, token: BigInt(b), capWallMs: c };
      }
      return undefined;
    default:
      return undefined;
  }
}

/**
 * A grant's fields after its type: `name, owner, token, ttlMs, wallMs`, then, for a `shared`
 * grant ('s'), its `limit`, then the optional `keyHash`. An exclusive grant has no `limit` key.
 */
function decodeGrant(fields: readonly unknown[], shared: boolean): JournalRecord | undefined {
  const [name, owner, token, ttlMs, wallMs] = fields;
  const limit = shared ? fields[5] : undefined;
  const keyHash = fields[shared ? 6 : 5];
  if (!isText(name) || !isText(owner) || !isToken(token) || !isMs(ttlMs) || !isMs(wallMs)) {
    return undefined;
  }
  if (keyHash !== undefined && !isText(keyHash)) return undefined;
  const grant = {
    type: 'grant' as const,
    name,
    owner,
    token: BigInt(token),
    ttlMs,
    wallMs,
    keyHash,
  };
  if (!shared) return grant;
  return isLimit(limit) ? Object.assign({}, grant, { limit }) : undefined;
}
