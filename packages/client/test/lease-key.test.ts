import { inspect } from 'node:util';
import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { SUBPROTOCOL } from '@dlm/protocol';
import { type RunningServer, startServer } from '@dlm/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createClient, type DlmClient } from '../src/index.js';
import { eventually, failOnUnhandledRejections, lockName } from './support.js';

failOnUnhandledRejections();

// Two servers over one backend. The client's sockets go wherever `target` says, and every frame
// it sends is kept, so the test knows the keys the client made without the client telling.
let backend: LockBackend;
let first: RunningServer;
let second: RunningServer;
let target = '';
const sent: Array<Record<string, any>> = [];
const sockets: WebSocket[] = [];

class RoutedWebSocket extends WebSocket {
  constructor(_url: string, protocols?: string | string[]) {
    super(target, protocols);
    sockets.push(this);
  }
  override send(data: unknown, ...rest: unknown[]): void {
    sent.push(JSON.parse(String(data)) as Record<string, any>);
    (super.send as (...args: unknown[]) => void)(data, ...rest);
  }
}

let client: DlmClient;

beforeAll(async () => {
  backend = await embeddedBackend();
  first = await startServer({ port: 0, backend });
  second = await startServer({ port: 0, backend });
  target = first.url;
  client = createClient({
    url: first.url,
    WebSocket: RoutedWebSocket as unknown as NonNullable<
      Parameters<typeof createClient>[0]['WebSocket']
    >,
    reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
  });
});
afterAll(async () => {
  await client.close();
  await first.close();
  await second.close();
  await backend.close();
});

function keySentFor(name: string): string {
  const frame = sent.findLast((f) => f.method === 'lock.acquire' && f.params?.name === name);
  return frame?.params?.leaseKey as string;
}

/** A raw v1 peer on `url`: another process that knows what lock.get shows. */
async function rawPeer(url: string) {
  const ws = new WebSocket(url, [SUBPROTOCOL]);
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  let id = 0;
  const call = (method: string, params: unknown) =>
    new Promise<Record<string, any>>((resolve) => {
      id += 1;
      const mine = id;
      const onMessage = (data: WebSocket.RawData) => {
        const frame = JSON.parse(data.toString()) as Record<string, any>;
        if (frame.id !== mine) return;
        ws.off('message', onMessage);
        resolve(frame);
      };
      ws.on('message', onMessage);
      ws.send(JSON.stringify({ jsonrpc: '2.0', id: mine, method, params }));
    });
  await call('session.hello', {});
  return { call, close: () => ws.close() };
}

describe('the lease key in the TypeScript client', () => {
  it('sends a fresh random key per acquire and never exposes it on the lease', async () => {
    const name = lockName('key-private');
    const lease = await client.acquire(name, { ttlMs: 10_000 });
    const key = keySentFor(name);
    expect(key).toMatch(/^[A-Za-z0-9_-]{22,128}$/);
    expect('leaseKey' in lease).toBe(false);
    expect(Object.keys(lease)).not.toContain('leaseKey');
    const shown = [
      inspect(lease, { showHidden: true, depth: Number.POSITIVE_INFINITY, getters: true }),
      JSON.stringify(lease, (_, v) => (typeof v === 'bigint' ? v.toString() : v)),
      String(lease),
    ].join('\n');
    expect(shown).toContain(lease.owner);
    expect(shown).not.toContain(key);
    await lease.release();
    const next = await client.acquire(name, { ttlMs: 10_000 });
    expect(keySentFor(name)).not.toBe(key);
    // Extends and releases carry the lease's own key.
    await next.extend();
    await next.release();
    const calls = sent.filter(
      (f) => (f.method === 'lock.extend' || f.method === 'lock.release') && f.params.name === name,
    );
    expect(calls.map((f) => f.params.leaseKey)).toEqual([key, keySentFor(name), keySentFor(name)]);
  });

  it('another process that knows the token cannot release or extend the lease', async () => {
    const name = lockName('key-meddler');
    const lease = await client.acquire(name, { ttlMs: 10_000 });
    const meddler = await rawPeer(second.url);
    try {
      const seen = (await meddler.call('lock.get', { name })).result;
      expect(seen.token).toBe(lease.token.toString());
      const release = await meddler.call('lock.release', { name, token: seen.token });
      expect(release.error.data.code).toBe('NOT_HOLDER');
      const extend = await meddler.call('lock.extend', { name, token: seen.token, ttlMs: 100 });
      expect(extend.error.data.code).toBe('NOT_HOLDER');
      const share = await meddler.call('lock.acquire', { name, ttlMs: 5_000, owner: lease.owner });
      expect(share.error.data.code).toBe('LOCK_HELD');
    } finally {
      meddler.close();
    }
    expect(lease.signal.aborted).toBe(false);
    expect(await lease.release()).toBe(true);
  });

  it('a holder that reconnected to another server extends and releases with its key', async () => {
    const name = lockName('key-reconnect');
    const lease = await client.acquire(name, { ttlMs: 10_000 });
    const before = sockets.length;
    target = second.url;
    sockets.at(-1)!.terminate();
    await eventually(
      () => sockets.length > before && sockets.at(-1)!.readyState === WebSocket.OPEN,
    );
    await lease.extend(10_000);
    expect(lease.remainingMs()).toBeGreaterThan(9_000);
    // A re-entry by the same owner on the new server presents the held lease's key.
    const again = await client.acquire(name, { ttlMs: 10_000, owner: lease.owner });
    expect(again.token).toBe(lease.token);
    expect(await lease.release()).toBe(true);
    expect((await client.get(name)).held).toBe(false);
    target = first.url;
  });

  it('a caller-chosen key is sent as is, and a bad one is INVALID_PARAMS', async () => {
    const name = lockName('key-chosen');
    const leaseKey = 'caller-chosen-key-for-a-resend-0123';
    const lease = await client.acquire(name, { ttlMs: 10_000, leaseKey });
    expect(keySentFor(name)).toBe(leaseKey);
    await lease.release();
    await expect(
      client.acquire(name, { ttlMs: 10_000, leaseKey: 'too-short', retry: false }),
    ).rejects.toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'leaseKey' } });
  });
});
