/**
 * Pattern matching and substitution for golden transcripts. A placeholder is a JSON object all
 * of whose keys start with `$`:
 *
 * - `{"$capture": "t1"}` matches any value and binds it to `t1` (a later capture rebinds);
 * - `{"$ref": "t1"}` matches a value equal to the one bound to `t1` (in a sent frame: is
 *   replaced by it);
 * - `{"$any": "string"}` matches a type: string, number, integer, boolean, null, object, array,
 *   token (a fencing token's decimal string) or value (anything);
 * - `{"$gt": "t1"}` matches a token greater than the bound one, compared as decimal big
 *   integers;
 * - `{"$between": [min, max]}` matches a number in [min, max];
 * - `{"$optional": true}` (as an object member) lets the member be absent.
 *
 * Keys combine: `{"$any": "token", "$gt": "t1", "$capture": "t2"}`. Objects match when they have
 * exactly the pattern's members (optional ones aside); arrays element by element; strings,
 * numbers, booleans and null by equality. `{{run}}` in any string is replaced by the run id.
 */

import { TranscriptFormatError } from '@dlm/protocol/transcripts';

export type Bindings = ReadonlyMap<string, unknown>;

export type MatchResult = { ok: true; bindings: Map<string, unknown> } | { ok: false; why: string };

const KEYS = new Set(['$capture', '$ref', '$any', '$gt', '$between', '$optional']);
const TOKEN = /^[1-9][0-9]{0,18}$/;
const MAX_TOKEN = 2n ** 63n - 1n;

export { TranscriptFormatError };

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Whether `value` is a placeholder object; throws on an unknown `$` key. */
export function isPlaceholder(value: unknown): value is Record<string, unknown> {
  if (!isPlainObject(value)) return false;
  const keys = Object.keys(value);
  if (!keys.length || !keys.every((key) => key.startsWith('$'))) return false;
  for (const key of keys) {
    if (!KEYS.has(key)) throw new TranscriptFormatError(`unknown placeholder key ${key}`);
  }
  return true;
}

function isToken(value: unknown): value is string {
  return typeof value === 'string' && TOKEN.test(value) && BigInt(value) <= MAX_TOKEN;
}

function bigIntOf(value: unknown): bigint | undefined {
  if (typeof value === 'string' && /^(0|[1-9][0-9]*)$/.test(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  return undefined;
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    case 'object':
      return isPlainObject(value);
    case 'array':
      return Array.isArray(value);
    case 'token':
      return isToken(value);
    case 'value':
      return value !== undefined;
    default:
      throw new TranscriptFormatError(`unknown $any type ${JSON.stringify(type)}`);
  }
}

/** Deep equality of JSON values. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length &&
      keys.every((key) => Object.hasOwn(b, key) && jsonEqual(a[key], b[key]))
    );
  }
  return false;
}

function bound(bindings: Bindings, name: unknown): unknown {
  if (typeof name !== 'string' || !bindings.has(name)) {
    throw new TranscriptFormatError(`${JSON.stringify(name)} is not bound (capture it first)`);
  }
  return bindings.get(name);
}

export function substituteRun(text: string, run: string): string {
  return text.replaceAll('{{run}}', run);
}

/**
 * A sent value with `{"$ref": name}` replaced by the bound value and `{{run}}` by the run id.
 * Other placeholders make no sense in a sent frame and are an error.
 */
export function substitute(value: unknown, bindings: Bindings, run: string): unknown {
  if (typeof value === 'string') return substituteRun(value, run);
  if (Array.isArray(value)) return value.map((item) => substitute(item, bindings, run));
  if (isPlaceholder(value)) {
    const keys = Object.keys(value);
    if (keys.length !== 1 || keys[0] !== '$ref') {
      throw new TranscriptFormatError(`only {"$ref": ...} may appear in a sent frame`);
    }
    return bound(bindings, value.$ref);
  }
  if (isPlainObject(value)) {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, substitute(item, bindings, run)]),
    );
  }
  return value;
}

function at(path: string): string {
  return path || '/';
}

function describe(value: unknown): string {
  const text = JSON.stringify(value);
  return text === undefined ? 'nothing' : text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

function matchPlaceholder(
  pattern: Record<string, unknown>,
  actual: unknown,
  bindings: Map<string, unknown>,
  path: string,
): string | null {
  if (actual === undefined) return `${at(path)}: missing`;
  if ('$ref' in pattern && !jsonEqual(actual, bound(bindings, pattern.$ref))) {
    return `${at(path)}: ${describe(actual)} is not ${pattern.$ref} (${describe(bindings.get(pattern.$ref as string))})`;
  }
  if ('$any' in pattern && !hasType(actual, pattern.$any as string)) {
    return `${at(path)}: ${describe(actual)} is not a ${pattern.$any}`;
  }
  if ('$gt' in pattern) {
    const than = bigIntOf(bound(bindings, pattern.$gt));
    const value = bigIntOf(actual);
    if (than === undefined) throw new TranscriptFormatError(`${pattern.$gt} is not an integer`);
    if (value === undefined || value <= than) {
      return `${at(path)}: ${describe(actual)} is not greater than ${pattern.$gt} (${than})`;
    }
  }
  if ('$between' in pattern) {
    const range = pattern.$between;
    const [min, max] = Array.isArray(range) ? range : [];
    if (
      !Array.isArray(range) ||
      range.length !== 2 ||
      typeof min !== 'number' ||
      typeof max !== 'number'
    )
      throw new TranscriptFormatError(`$between needs [min, max]`);
    if (typeof actual !== 'number' || actual < min || actual > max) {
      return `${at(path)}: ${describe(actual)} is not in [${min}, ${max}]`;
    }
  }
  if ('$capture' in pattern) {
    if (typeof pattern.$capture !== 'string')
      throw new TranscriptFormatError('$capture needs a name');
    bindings.set(pattern.$capture, actual);
  }
  return null;
}

function matchInto(
  pattern: unknown,
  actual: unknown,
  bindings: Map<string, unknown>,
  run: string,
  path: string,
): string | null {
  if (isPlaceholder(pattern)) return matchPlaceholder(pattern, actual, bindings, path);
  if (Array.isArray(pattern)) {
    if (!Array.isArray(actual) || actual.length !== pattern.length) {
      return `${at(path)}: expected an array of ${pattern.length}, got ${describe(actual)}`;
    }
    for (let i = 0; i < pattern.length; i += 1) {
      const why = matchInto(pattern[i], actual[i], bindings, run, `${path}/${i}`);
      if (why) return why;
    }
    return null;
  }
  if (isPlainObject(pattern)) {
    if (!isPlainObject(actual)) return `${at(path)}: expected an object, got ${describe(actual)}`;
    for (const [key, item] of Object.entries(pattern)) {
      if (!Object.hasOwn(actual, key)) {
        if (isPlaceholder(item) && item.$optional === true) continue;
        return `${at(`${path}/${key}`)}: missing`;
      }
      const why = matchInto(item, actual[key], bindings, run, `${path}/${key}`);
      if (why) return why;
    }
    for (const key of Object.keys(actual)) {
      if (!Object.hasOwn(pattern, key)) return `${at(`${path}/${key}`)}: unexpected member`;
    }
    return null;
  }
  const expected = typeof pattern === 'string' ? substituteRun(pattern, run) : pattern;
  return expected === actual
    ? null
    : `${at(path)}: expected ${describe(expected)}, got ${describe(actual)}`;
}

/**
 * Matches a received value against a pattern. On success, returns the bindings with this
 * match's captures added (the input is left as it was, so a failed match binds nothing).
 */
export function matchPattern(
  pattern: unknown,
  actual: unknown,
  bindings: Bindings,
  run: string,
): MatchResult {
  const next = new Map(bindings);
  const why = matchInto(pattern, actual, next, run, '');
  return why === null ? { ok: true, bindings: next } : { ok: false, why };
}
