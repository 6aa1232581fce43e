import { embeddedBackend } from '@dlm/adapter-embedded';
import { hashLeaseKey, type LockBackend } from '@dlm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

// Two dlm servers over one backend: a deployment behind a load balancer. The key presented on
// the other server works; a token alone does not, on either.
const logLines: string[] = [];
let backend: LockBackend;
let first: RunningServer;
let second: RunningServer;
const peers: Peer[] = [];

beforeAll(async () => {
  backend = await embeddedBackend();
  const logger = createLogger('debug', (line) => logLines.push(line));
  first = await startServer({ port: 0, backend, logger });
  second = await startServer({ port: 0, backend, logger });
});
afterAll(async () => {
  for (const peer of peers) peer.close();
  await first.close();
  await second.close();
  await backend.close();
});

async function session(server: RunningServer = first): Promise<Peer> {
  const peer = await openSession(server.url);
  peers.push(peer);
  return peer;
}

const KEY = /^[A-Za-z0-9_-]{22,128}$/;

describe('only the holder', () => {
  it('another session that knows the token and owner can neither release, extend nor share the lease', async () => {
    const a = await session();
    const b = await session();
    const granted = (
      await a.call('lock.acquire', { name: 'victim', owner: 'holder-1', ttlMs: 30_000 })
    ).result;
    expect(granted.leaseKey).toMatch(KEY);
    const seen = (await b.call('lock.get', { name: 'victim' })).result;
    expect(seen).toEqual({
      name: 'victim',
      held: true,
      owner: 'holder-1',
      token: granted.token,
      ttlRemainingMs: expect.any(Number),
      mode: 'exclusive',
      holders: [{ owner: 'holder-1', token: granted.token, ttlRemainingMs: expect.any(Number) }],
      waiters: 0,
      waitersScope: 'server',
    });
    const release = await b.call('lock.release', { name: 'victim', token: seen.token });
    expect(release.error.data.code).toBe('NOT_HOLDER');
    const extend = await b.call('lock.extend', { name: 'victim', token: seen.token, ttlMs: 5_000 });
    expect(extend.error.data.code).toBe('NOT_HOLDER');
    const share = await b.call('lock.acquire', { name: 'victim', owner: 'holder-1', ttlMs: 5_000 });
    expect(share.error.data.code).toBe('LOCK_HELD');
    // A wrong key answers exactly like no key.
    const guessed = await b.call('lock.release', {
      name: 'victim',
      token: seen.token,
      leaseKey: 'x'.repeat(22),
    });
    expect(guessed.error).toEqual(release.error);
    // The meddling did not cost the holder its lease, nor its session the right to use it.
    expect((await a.call('lock.get', { name: 'victim' })).result.token).toBe(granted.token);
    const extended = await a.call('lock.extend', {
      name: 'victim',
      token: granted.token,
      ttlMs: 30_000,
    });
    expect(extended.result.token).toBe(granted.token);
    const again = await a.call('lock.acquire', {
      name: 'victim',
      owner: 'holder-1',
      ttlMs: 30_000,
    });
    expect(again.result).toMatchObject({ token: granted.token, leaseKey: granted.leaseKey });
    expect((await a.call('lock.release', { name: 'victim', token: granted.token })).result).toEqual(
      { released: true },
    );
  });

  it('a holder that reconnected to another server keeps working with its key', async () => {
    const a = await session(first);
    const leaseKey = 'reconnecting-holder-key-0123456789';
    const granted = (
      await a.call('lock.acquire', { name: 'moved', owner: 'holder-2', ttlMs: 30_000, leaseKey })
    ).result;
    expect(granted.leaseKey).toBe(leaseKey);
    a.close();
    const elsewhere = await session(second);
    // A re-sent acquire after a lost reply: same owner, same key, another connection.
    const resent = await elsewhere.call('lock.acquire', {
      name: 'moved',
      owner: 'holder-2',
      ttlMs: 30_000,
      leaseKey,
    });
    expect(resent.result.token).toBe(granted.token);
    const tokenOnly = await elsewhere.call('lock.extend', {
      name: 'moved',
      token: granted.token,
      ttlMs: 30_000,
    });
    // The re-acquire made this session a holder: without the key it may go on.
    expect(tokenOnly.result.token).toBe(granted.token);
    const other = await session(second);
    expect(
      (await other.call('lock.release', { name: 'moved', token: granted.token })).error.data.code,
    ).toBe('NOT_HOLDER');
    const extended = await other.call('lock.extend', {
      name: 'moved',
      token: granted.token,
      ttlMs: 30_000,
      leaseKey,
    });
    expect(extended.result.token).toBe(granted.token);
    expect(
      (await other.call('lock.release', { name: 'moved', token: granted.token, leaseKey })).result,
    ).toEqual({ released: true });
  });

  it('a bad leaseKey is INVALID_PARAMS naming leaseKey, without echoing it', async () => {
    const peer = await session();
    const bad = 'short-key';
    for (const [method, params] of [
      ['lock.acquire', { name: 'bad-key', ttlMs: 5_000, leaseKey: bad }],
      ['lock.release', { name: 'bad-key', token: '1', leaseKey: bad }],
      ['lock.extend', { name: 'bad-key', token: '1', ttlMs: 5_000, leaseKey: bad }],
    ] as const) {
      const reply = await peer.call(method, params);
      expect(reply.error.data).toMatchObject({ code: 'INVALID_PARAMS', field: 'leaseKey' });
      expect(JSON.stringify(reply)).not.toContain(bad);
    }
  });

  it('no key appears in lock.get, lock.watch, lock.changed, lock.lost, the admin API, metrics or logs', async () => {
    const watcher = await session(second);
    const holder = await session(first);
    const watched = await watcher.call('lock.watch', { name: 'secret/one' });
    const prefixed = watcher.call('lock.watchPrefix', { prefix: 'secret/' });
    await prefixed;
    const leaseKey = 'a-key-nobody-else-may-see-0123456789';
    const granted = (
      await holder.call('lock.acquire', {
        name: 'secret/one',
        owner: 'holder-3',
        ttlMs: 30_000,
        leaseKey,
      })
    ).result;
    const made = (await holder.call('lock.acquire', { name: 'secret/two', ttlMs: 30_000 })).result;
    await holder.call('lock.extend', {
      name: 'secret/one',
      token: granted.token,
      ttlMs: 30_000,
      leaseKey,
    });
    const outputs: string[] = [JSON.stringify(watched)];
    outputs.push(JSON.stringify(await watcher.call('lock.get', { name: 'secret/one' })));
    outputs.push(JSON.stringify(await watcher.call('lock.watchPrefix', { prefix: 'secret/' })));
    for (const server of [first, second]) {
      outputs.push(await (await fetch(`${server.httpUrl}/v1/locks?prefix=secret%2F`)).text());
      outputs.push(await (await fetch(`${server.httpUrl}/v1/locks/secret%2Fone`)).text());
    }
    // An operator's revoke: the holder hears lock.lost.
    await fetch(`${first.httpUrl}/v1/locks/secret%2Fone`, { method: 'DELETE' });
    await holder.nextNotification('lock.lost');
    await holder.call('lock.release', { name: 'secret/two', token: made.token });
    await new Promise((resolve) => setTimeout(resolve, 100));
    for (const server of [first, second]) {
      outputs.push(await (await fetch(`${server.httpUrl}/metrics`)).text());
      outputs.push(await (await fetch(`${server.httpUrl}/`)).text());
    }
    outputs.push(JSON.stringify(watcher.notifications), JSON.stringify(holder.notifications));
    outputs.push(...logLines);
    const everything = outputs.join('\n');
    // The test can fail: these outputs are about the very leases, and do name their tokens.
    expect(everything).toContain(`"token":"${granted.token}"`);
    expect(logLines.some((line) => line.includes('secret/one'))).toBe(true);
    for (const secret of [leaseKey, made.leaseKey]) {
      expect(secret).toMatch(KEY);
      expect(everything).not.toContain(secret);
      expect(everything).not.toContain(hashLeaseKey(secret));
    }
  });
});
