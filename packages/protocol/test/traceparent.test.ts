import { describe, expect, it } from 'vitest';
import {
  conforms,
  formatTraceparent,
  type MethodName,
  Methods,
  parseTraceparent,
} from '../src/index.js';

const VALID = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('traceparent', () => {
  it('parses a version-00 traceparent into its trace id, parent id and flags', () => {
    expect(parseTraceparent(VALID)).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      flags: 1,
    });
    expect(parseTraceparent(VALID.replace(/01$/, '00'))?.flags).toBe(0);
  });

  it('reads the four fields of a later version, which may append more', () => {
    expect(parseTraceparent(`cc${VALID.slice(2)}-what-comes-next`)?.traceId).toBe(
      '4bf92f3577b34da6a3ce929d0e0e4736',
    );
  });

  it.each([
    ['not a string', 42],
    ['empty', ''],
    ['uppercase hex', VALID.toUpperCase()],
    ['a short trace id', '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01'],
    ['an all-zero trace id', `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`],
    ['an all-zero parent id', `00-4bf92f3577b34da6a3ce929d0e0e4736-${'0'.repeat(16)}-01`],
    ['version ff', `ff${VALID.slice(2)}`],
    ['version 00 with a fifth field', `${VALID}-extra`],
    ['no separators', VALID.replaceAll('-', '')],
  ])('refuses %s', (_what, value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it('formats what it parses back to the same string', () => {
    const parsed = parseTraceparent(VALID);
    expect(parsed).toBeDefined();
    expect(formatTraceparent(parsed!)).toBe(VALID);
  });

  it("every request's params may carry a traceparent, and the schema checks its shape", () => {
    const minimal: Record<MethodName, Record<string, unknown>> = {
      'session.hello': {},
      'session.ping': {},
      'lock.acquire': { name: 'a', ttlMs: 1000 },
      'lock.acquireAll': { locks: [{ name: 'a' }], ttlMs: 1000 },
      'lock.release': { name: 'a', token: '1' },
      'lock.extend': { name: 'a', token: '1', ttlMs: 1000 },
      'lock.get': { name: 'a' },
      'lock.requestRelease': { name: 'a' },
      'lock.check': { name: 'a', token: '1' },
      'lock.watch': { name: 'a' },
      'lock.unwatch': { watchId: 'w' },
      'lock.watchPrefix': { prefix: '' },
    };
    expect(Object.keys(minimal).sort()).toEqual(Object.keys(Methods).sort());
    for (const method of Object.keys(minimal) as MethodName[]) {
      expect(conforms({ params: method }, { ...minimal[method], traceparent: VALID })).toBe(true);
      expect(conforms({ params: method }, { ...minimal[method], traceparent: 'garbage' })).toBe(
        false,
      );
    }
  });
});
