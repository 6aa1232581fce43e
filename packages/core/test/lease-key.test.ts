import { describe, expect, it } from 'vitest';
import { isDlmError } from '../src/errors.js';
import { createLeaseKey, hashLeaseKey } from '../src/lease-key.js';
import { validateLeaseKey } from '../src/validation.js';

describe('lease keys', () => {
  it('createLeaseKey makes 128-bit keys of the protocol alphabet, never the same twice', () => {
    const keys = new Set(Array.from({ length: 1_000 }, () => createLeaseKey()));
    expect(keys.size).toBe(1_000);
    for (const key of keys) {
      expect(key).toMatch(/^[A-Za-z0-9_-]{22}$/);
      // 22 base64url characters carry 132 bits; 16 random bytes fill 128 of them.
      expect(Buffer.from(key, 'base64url')).toHaveLength(16);
      expect(validateLeaseKey(key)).toBe(key);
    }
  });

  it('hashLeaseKey is SHA-256, stable, and has no character a value encoding splits on', () => {
    const key = 'a-key-of-twenty-two-ch';
    expect(hashLeaseKey(key)).toBe(hashLeaseKey(key));
    expect(hashLeaseKey(key)).not.toBe(hashLeaseKey(`${key}x`));
    expect(hashLeaseKey(key)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // The FIPS 180-2 test vector: SHA-256("abc").
    expect(Buffer.from(hashLeaseKey('abc'), 'base64url').toString('hex')).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
  });

  it('validateLeaseKey accepts 22-128 characters of [A-Za-z0-9_-] and never echoes a bad one', () => {
    expect(validateLeaseKey('k'.repeat(22))).toBe('k'.repeat(22));
    expect(validateLeaseKey('Az09_-'.repeat(22).slice(0, 128))).toHaveLength(128);
    for (const bad of [
      'k'.repeat(21),
      'k'.repeat(129),
      `${'k'.repeat(22)}=`,
      `${'k'.repeat(22)} `,
      42,
      null,
    ]) {
      try {
        validateLeaseKey(bad);
        expect.unreachable(`accepted ${String(bad)}`);
      } catch (error) {
        expect(isDlmError(error, 'INVALID_PARAMS')).toBe(true);
        expect((error as Error & { details: { field?: string } }).details.field).toBe('leaseKey');
        if (typeof bad === 'string') expect((error as Error).message).not.toContain(bad);
      }
    }
  });
});
