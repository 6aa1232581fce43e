import type { ICompare } from 'etcd3';

/**
 * A lock key's value: `<keyHash>\n<owner>`, or the owner alone for a lease granted without a
 * key hash (and by versions before it). Owners never contain control characters (core checks),
 * so the first `\n` splits it. The hash comes first so that a transaction can check it with two
 * byte-wise comparisons of the value (`> hash\n` and `< hash\v`: the value starts with `hash\n`),
 * in the same transaction that compares the create revision (the token): etcd compares a whole
 * value only, and a release or extend does not know the owner.
 *
 * A lease with a cap on holding (etcd-hold-cap.ts) carries it just before the owner:
 * `<keyHash>\n\x1f<capAtMs> <maxHoldMs>\x1f<owner>`. After the hash, an uncapped value goes on
 * with the owner's first character (at least a space), a capped one with `\x1f`: so the same two
 * kinds of comparison tell a capped lease from an uncapped one (`uncappedCompares`).
 */
export function holderValue(
  owner: string,
  keyHash: string | undefined,
  cap?: HoldCap | undefined,
): Buffer {
  const capped = cap === undefined ? owner : `${CAP}${cap.capAtMs} ${cap.maxHoldMs}${CAP}${owner}`;
  return Buffer.from(keyHash === undefined ? capped : `${keyHash}\n${capped}`);
}

/** Where a lease's cap on holding ends, on the granting server's wall clock, and how long it is. */
export interface HoldCap {
  capAtMs: number;
  maxHoldMs: number;
}

const CAP = '\x1f';

/** A lock key's value taken apart: its key hash (if any), its cap (if any), its owner. */
function partsOfValue(value: Buffer): { keyHash?: string; cap?: HoldCap; owner: string } {
  const text = value.toString();
  const newline = text.indexOf('\n');
  const keyHash = newline < 0 ? undefined : text.slice(0, newline);
  const rest = newline < 0 ? text : text.slice(newline + 1);
  const end = rest.startsWith(CAP) ? rest.indexOf(CAP, 1) : -1;
  const [capAtMs, maxHoldMs] = end < 0 ? [] : rest.slice(1, end).split(' ').map(Number);
  const cap =
    Number.isSafeInteger(capAtMs) && Number.isSafeInteger(maxHoldMs)
      ? { capAtMs: capAtMs!, maxHoldMs: maxHoldMs! }
      : undefined;
  const owner = end < 0 ? rest : rest.slice(end + 1);
  return Object.assign({}, keyHash === undefined ? {} : { keyHash }, cap ? { cap } : {}, { owner });
}

/** The owner in a lock key's value; the key hash never leaves this adapter. */
export function ownerOfValue(value: Buffer): string {
  return partsOfValue(value).owner;
}

/** The cap on holding a lock key's value carries; undefined: none. */
export function capOfValue(value: Buffer): HoldCap | undefined {
  return partsOfValue(value).cap;
}

/**
 * A lock key's value is this owner's with this key hash (any cap; with no hash asked, the
 * owner's without one), as a re-acquire by the same owner and key needs.
 */
export function isOwnValue(value: Buffer, owner: string, keyHash: string | undefined): boolean {
  const parts = partsOfValue(value);
  return parts.owner === owner && parts.keyHash === keyHash;
}

/** The lock key's value carries `keyHash` (any cap, any owner); undefined: any value does. */
export function hasKeyHash(value: Buffer, keyHash: string | undefined): boolean {
  return keyHash === undefined || partsOfValue(value).keyHash === keyHash;
}

/** Compares that hold when `key`'s value carries `keyHash` (none when undefined: token only). */
export function keyHashCompares(key: Buffer, keyHash: string | undefined): ICompare[] {
  if (keyHash === undefined) return [];
  return [
    { key, target: 'Value', result: 'Greater', value: Buffer.from(`${keyHash}\n`) },
    { key, target: 'Value', result: 'Less', value: Buffer.from(`${keyHash}\v`) },
  ];
}

/**
 * Compares that hold when `key`'s value carries `keyHash` and no cap on holding: after
 * `hash\n`, a byte above `\x1f` (an owner's first character), not the cap's `\x1f`.
 */
export function uncappedCompares(key: Buffer, keyHash: string): ICompare[] {
  const [, below] = keyHashCompares(key, keyHash);
  const afterCap = Buffer.concat([Buffer.from(`${keyHash}\n${CAP}`), Buffer.from([0xff])]);
  return [{ key, target: 'Value', result: 'Greater', value: afterCap }, below!];
}

/**
 * A shared holder key's value: `<limit>\n<owner>`. The key hash is in the key's name
 * (etcd-keys.ts), so a compare on the key's create revision checks both; the limit is here so
 * that a newcomer reads the limit the holders agreed on from any one of them.
 */
export function sharedValue(limit: number, owner: string): Buffer {
  return Buffer.from(`${limit}\n${owner}`);
}

/** The limit in a shared holder key's value. */
export function limitOfValue(value: Buffer): number {
  const text = value.toString();
  return Number(text.slice(0, text.indexOf('\n')));
}
