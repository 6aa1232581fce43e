import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/errors.js';
import { MAX_TOKEN, parseToken } from '../src/fencing.js';
import { validateName, validateTtl, validateWait } from '../src/validation.js';

function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    if (isDlmError(error, 'INVALID_PARAMS')) return error.details.field;
    throw error;
  }
  return undefined;
}

describe('validation', () => {
  it('accepts names of 1-256 UTF-8 bytes and rejects the rest, naming the field', () => {
    expect(validateName('a')).toBe('a');
    expect(validateName('é'.repeat(128))).toBe('é'.repeat(128));
    expect(fieldOf(() => validateName(`${'é'.repeat(128)}x`))).toBe('name');
    expect(fieldOf(() => validateName(''))).toBe('name');
    expect(fieldOf(() => validateName(42))).toBe('name');
    expect(fieldOf(() => validateName('a\nb'))).toBe('name');
    expect(fieldOf(() => validateName('a\u007fb'))).toBe('name');
    expect(fieldOf(() => validateName('\ud800'))).toBe('name');
  });

  it('checks ttlMs and waitMs are integers within bounds', () => {
    expect(validateTtl(100)).toBe(100);
    expect(fieldOf(() => validateTtl(99))).toBe('ttlMs');
    expect(fieldOf(() => validateTtl(1000.5))).toBe('ttlMs');
    expect(fieldOf(() => validateTtl('1000'))).toBe('ttlMs');
    expect(fieldOf(() => validateTtl(86_400_001))).toBe('ttlMs');
    expect(validateWait(undefined)).toBe(0);
    expect(fieldOf(() => validateWait(-1))).toBe('waitMs');
    expect(fieldOf(() => validateWait(300_001))).toBe('waitMs');
  });

  it('parses tokens only as decimal strings in [1, 2^63-1]', () => {
    expect(parseToken('1')).toBe(1n);
    expect(parseToken(MAX_TOKEN.toString())).toBe(MAX_TOKEN);
    for (const bad of ['0', '01', '-1', '1.0', ' 1', '9223372036854775808', 1, null]) {
      expect(fieldOf(() => parseToken(bad))).toBe('token');
    }
  });
});
