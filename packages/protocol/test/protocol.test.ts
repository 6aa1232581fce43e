import { DlmError, ERROR_CODES, type ErrorCode } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import {
  conforms,
  fromRpcError,
  Methods,
  Notifications,
  packFrames,
  protocolJsonSchema,
  toRpcError,
  utf8Length,
} from '../src/index.js';

describe('error mapping', () => {
  it('every error code maps to its JSON-RPC number and back', () => {
    for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
      const wire = toRpcError(new DlmError(code, 'why', { field: 'name', ttlRemainingMs: 5 }));
      expect(wire.code).toBe(ERROR_CODES[code].rpc);
      expect(wire.data).toMatchObject({
        code,
        retryable: ERROR_CODES[code].retryable,
        field: 'name',
      });
      expect(conforms({ error: true }, wire)).toBe(true);
      const back = fromRpcError(wire);
      expect(back.code).toBe(code);
      expect(back.details).toEqual({ field: 'name', ttlRemainingMs: 5 });
    }
  });

  it("acquireAll's data.name (the lock that could not be had) comes back as details.name", () => {
    const wire = toRpcError(
      new DlmError('LOCK_HELD', 'held', { name: 'jobs/b', ttlRemainingMs: 7 }),
    );
    expect(wire.data).toMatchObject({ name: 'jobs/b' });
    expect(fromRpcError(wire).details).toEqual({ name: 'jobs/b', ttlRemainingMs: 7 });
  });

  it("a limit conflict's data.limit (the holders' limit) goes on the wire and comes back", () => {
    const wire = toRpcError(
      new DlmError('INVALID_PARAMS', 'limit 3 differs', { field: 'limit', limit: 2 }),
    );
    expect(wire.data).toEqual({
      code: 'INVALID_PARAMS',
      retryable: false,
      field: 'limit',
      limit: 2,
    });
    expect(fromRpcError(wire).details).toEqual({ field: 'limit', limit: 2 });
  });

  it('an unexpected exception becomes INTERNAL without leaking its message', () => {
    const wire = toRpcError(new TypeError('secret detail'));
    expect(wire).toEqual({
      code: -32603,
      message: 'internal error',
      data: { code: 'INTERNAL', retryable: false },
    });
  });

  it('an error with an unknown data.code falls back to the number', () => {
    expect(
      fromRpcError({ code: 1002, message: 'm', data: { code: 'FUTURE', retryable: false } }).code,
    ).toBe('NOT_HOLDER');
  });
});

describe('schemas', () => {
  it('accept the documented examples and reject wrong shapes', () => {
    expect(conforms({ params: 'lock.acquire' }, { name: 'jobs', ttlMs: 1000 })).toBe(true);
    expect(conforms({ params: 'lock.acquire' }, { name: 'jobs' })).toBe(false);
    expect(
      conforms({ result: 'lock.acquire' }, { name: 'jobs', owner: 'o', token: '17', ttlMs: 1000 }),
    ).toBe(true);
    expect(
      conforms({ result: 'lock.acquire' }, { name: 'jobs', owner: 'o', token: 17, ttlMs: 1000 }),
    ).toBe(false);
    expect(
      conforms({ result: 'lock.acquire' }, { name: 'jobs', owner: 'o', token: '017', ttlMs: 1000 }),
    ).toBe(false);
    expect(
      conforms({ params: 'lock.acquire' }, { name: 'j', ttlMs: 1000, mode: 'exclusive' }),
    ).toBe(true);
    expect(conforms({ params: 'lock.acquire' }, { name: 'j', ttlMs: 1000, mode: 'read' })).toBe(
      false,
    );
    expect(conforms({ params: 'lock.acquireAll' }, { locks: [], ttlMs: 1000 })).toBe(false);
    expect(conforms({ params: 'lock.acquireAll' }, { locks: ['a'], ttlMs: 1000 })).toBe(false);
    const unmoded = { name: 'a', owner: 'o', token: '3', ttlMs: 1000 };
    const grant = { ...unmoded, mode: 'exclusive' };
    expect(conforms({ result: 'lock.acquireAll' }, { grants: [grant] })).toBe(true);
    expect(conforms({ result: 'lock.acquireAll' }, { grants: [unmoded] })).toBe(false);
    const shared = { ...unmoded, mode: 'shared', limit: 3 };
    expect(conforms({ result: 'lock.acquire' }, shared)).toBe(true);
    expect(conforms({ result: 'lock.acquire' }, { ...shared, limit: 0 })).toBe(false);
    expect(conforms({ result: 'lock.acquireAll' }, { grants: [shared, grant] })).toBe(true);
    expect(conforms({ params: 'lock.acquire' }, { name: 'j', ttlMs: 1, mode: 'shared' })).toBe(
      true,
    );
    expect(
      conforms({ params: 'lock.acquire' }, { name: 'j', ttlMs: 1, mode: 'shared', limit: 0 }),
    ).toBe(false);
    const holder = { owner: 'o', token: '3', ttlRemainingMs: 10 };
    const held = { name: 'j', held: true, ...holder, mode: 'shared', limit: 2 };
    expect(conforms({ result: 'lock.get' }, { ...held, holders: [holder] })).toBe(true);
    expect(conforms({ result: 'lock.get' }, { ...held, holders: [] })).toBe(false);
    expect(conforms({ result: 'lock.get' }, { ...held, holders: [{ owner: 'o' }] })).toBe(false);
    expect(conforms({ result: 'lock.get' }, { ...held, mode: 'read' })).toBe(false);
    const changed = { watchId: 'w1', name: 'j', held: true, mode: 'shared', holders: 2 };
    expect(conforms({ notification: 'lock.changed' }, changed)).toBe(true);
    expect(conforms({ notification: 'lock.changed' }, { ...changed, holders: -1 })).toBe(false);
    expect(conforms({ result: 'lock.get' }, { name: 'jobs', held: false })).toBe(true);
    expect(conforms({ result: 'lock.get' }, { name: 'jobs', held: true })).toBe(false);
    expect(
      conforms({ notification: 'lock.lost' }, { name: 'j', token: '1', reason: 'expired' }),
    ).toBe(true);
    expect(
      conforms({ notification: 'lock.lost' }, { name: 'j', token: '1', reason: 'stolen' }),
    ).toBe(false);
  });

  it('the JSON Schema document has params and results of every method and notification', () => {
    const doc = protocolJsonSchema() as { $defs: Record<string, { type?: string }> };
    for (const method of Object.keys(Methods)) {
      expect(doc.$defs[`${method}.params`]).toBeDefined();
      expect(doc.$defs[`${method}.result`]).toBeDefined();
    }
    for (const method of Object.keys(Notifications))
      expect(doc.$defs[`${method}.params`]).toBeDefined();
    expect(JSON.stringify(doc)).not.toContain('Symbol');
  });
});

describe('multi-message frames: packFrames', () => {
  const message = (id: number, pad = '') => JSON.stringify({ jsonrpc: '2.0', id, result: { pad } });

  it('one message stays an object frame; several become one array, in order', () => {
    expect(packFrames([message(1)], 100)).toEqual([message(1)]);
    const frames = packFrames([message(1), message(2), message(3)], 65_536);
    expect(frames).toHaveLength(1);
    expect(JSON.parse(frames[0]!).map((m: { id: number }) => m.id)).toEqual([1, 2, 3]);
  });

  it('cuts before a frame would pass the bound, counting UTF-8 bytes; an oversize message goes alone', () => {
    const big = (id: number) => message(id, '€'.repeat(100)); // 300 bytes of pad, 100 units
    const size = utf8Length(big(1));
    expect(size).toBe(Buffer.byteLength(big(1)));
    const frames = packFrames([big(1), big(2), big(3)], 2 * size + 3);
    expect(frames.map((f) => Buffer.byteLength(f) <= 2 * size + 3)).toEqual([true, true]);
    expect(frames.map((f) => JSON.parse(f))).toEqual([
      [JSON.parse(big(1)), JSON.parse(big(2))],
      JSON.parse(big(3)),
    ]);
    expect(packFrames([big(1), message(2)], 10)).toEqual([big(1), message(2)]);
    for (const text of ['a', 'é', '€', '😀', '\ud800x', 'x\udc00']) {
      expect(utf8Length(text), text).toBe(Buffer.byteLength(text));
    }
  });
});
