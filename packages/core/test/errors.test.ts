import { describe, expect, it } from 'vitest';
import { DlmError, toUnavailable } from '../src/errors.js';

describe('toUnavailable', () => {
  it("names the backend before the client's words, unless they name it already", () => {
    const refused = new Error('connect ECONNREFUSED 127.0.0.1:5432');
    const named = toUnavailable(refused, 'acquire', false, 'PostgreSQL');
    expect(named).toMatchObject({
      code: 'UNAVAILABLE',
      message: 'acquire: PostgreSQL: connect ECONNREFUSED 127.0.0.1:5432',
      cause: refused,
    });
    const down = new Error('not connected to Redis (the connection is down; reconnecting)');
    expect(toUnavailable(down, 'release', true, 'Redis')).toMatchObject({
      message: 'release: not connected to Redis (the connection is down; reconnecting)',
      details: { indeterminate: true },
    });
    expect(toUnavailable(refused, 'acquire').message).toBe(
      'acquire: connect ECONNREFUSED 127.0.0.1:5432',
    );
    const already = new DlmError('UNAVAILABLE', 'acquire: etcd did not answer');
    expect(toUnavailable(already, 'acquire', false, 'PostgreSQL')).toBe(already);
  });
});
