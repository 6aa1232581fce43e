import { describe, expect, it } from 'vitest';
import { matchPattern, TranscriptFormatError } from '../src/index.js';

describe('matchPattern', () => {
  const empty = new Map<string, unknown>();
  const ok = (pattern: unknown, actual: unknown, bindings = empty, run = 'r1') =>
    matchPattern(pattern, actual, bindings, run).ok;

  it('objects match exactly their members; arrays element by element', () => {
    expect(ok({ a: 1, b: [1, 'x'] }, { a: 1, b: [1, 'x'] })).toBe(true);
    expect(ok({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(ok({ a: 1, b: 2 }, { a: 1 })).toBe(false);
    expect(ok([1, 2], [1, 2, 3])).toBe(false);
    expect(ok(null, null)).toBe(true);
    expect(ok(1, '1')).toBe(false);
  });

  it('$capture binds, $ref compares, and a failed match binds nothing', () => {
    const first = matchPattern({ t: { $capture: 'tok' } }, { t: '17' }, empty, 'r');
    expect(first.ok && first.bindings.get('tok')).toBe('17');
    const bindings = first.ok ? first.bindings : empty;
    expect(ok({ t: { $ref: 'tok' } }, { t: '17' }, bindings)).toBe(true);
    expect(ok({ t: { $ref: 'tok' } }, { t: '18' }, bindings)).toBe(false);
    const failed = matchPattern(
      { a: { $capture: 'x' }, b: 1 },
      { a: 'captured', b: 2 },
      empty,
      'r',
    );
    expect(failed.ok).toBe(false);
    expect(() => ok({ $ref: 'unbound' }, 1)).toThrow(TranscriptFormatError);
  });

  it('$gt compares tokens as big integers, beyond 2^53', () => {
    const bindings = new Map([['t', '9007199254740993']]);
    expect(ok({ $gt: 't' }, '9007199254740994', bindings)).toBe(true);
    expect(ok({ $gt: 't' }, '9007199254740993', bindings)).toBe(false);
    expect(ok({ $gt: 't' }, '900719925474099', bindings)).toBe(false);
    expect(ok({ $gt: 't' }, 'abc', bindings)).toBe(false);
  });

  it('$any checks types, including token', () => {
    expect(ok({ $any: 'token' }, '42')).toBe(true);
    expect(ok({ $any: 'token' }, '042')).toBe(false);
    expect(ok({ $any: 'token' }, '9223372036854775808')).toBe(false);
    expect(ok({ $any: 'token' }, 42)).toBe(false);
    expect(ok({ $any: 'integer' }, 1.5)).toBe(false);
    expect(ok({ $any: 'object' }, [])).toBe(false);
    expect(ok({ $any: 'value' }, null)).toBe(true);
    expect(() => ok({ $any: 'uuid' }, 'x')).toThrow(TranscriptFormatError);
  });

  it('$between is inclusive; $optional lets a member be absent but checks it when present', () => {
    expect(ok({ $between: [0, 10] }, 10)).toBe(true);
    expect(ok({ $between: [0, 10] }, 10.5)).toBe(false);
    expect(ok({ $between: [0, 10] }, '5')).toBe(false);
    const pattern = { code: 1, ms: { $between: [0, 10], $optional: true } };
    expect(ok(pattern, { code: 1 })).toBe(true);
    expect(ok(pattern, { code: 1, ms: 5 })).toBe(true);
    expect(ok(pattern, { code: 1, ms: 50 })).toBe(false);
  });

  it('{{run}} is replaced in expected strings', () => {
    expect(ok({ name: '{{run}}/jobs' }, { name: 'r1/jobs' })).toBe(true);
    expect(ok({ name: '{{run}}/jobs' }, { name: '{{run}}/jobs' })).toBe(false);
  });

  it('an unknown placeholder key is a transcript error, not a mismatch', () => {
    expect(() => ok({ $regex: '.*' }, 'x')).toThrow(TranscriptFormatError);
  });
});
