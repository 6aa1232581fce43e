import type { ICompare } from 'etcd3';

/**
 * A lock key's value: `<keyHash>\n<owner>`, or the owner alone for a lease granted without a
 * key hash (and by versions before it). Owners never contain control characters (core checks),
 * so the first `\n` splits it. The hash comes first so that a transaction can check it with two
 * byte-wise comparisons of the value (`> hash\n` and `< hash\v`: the value starts with `hash\n`),
 * in the same transaction that compares the create revision (the token): etcd compares a whole
 * value only, and a release or extend does not know the owner.
 */
export function holderValue(owner: string, keyHash: string | undefined): Buffer {
  return Buffer.from(keyHash === undefined ? owner : `${keyHash}\n${owner}`);
}

/** The owner in a lock key's value; the key hash never leaves this adapter. */
export function ownerOfValue(value: Buffer): string {
  const text = value.toString();
  const newline = text.indexOf('\n');
  return newline < 0 ? text : text.slice(newline + 1);
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
