import { sleep, until } from '@dlm/conformance';
import { describe, expect, it } from 'vitest';
import { hashToken, newToken, startServer } from '../src/index.js';
import { embeddedServerFixture } from './support.js';
import { connect } from './ws-peer.js';

const fixture = embeddedServerFixture();
const { peers, servers, session } = fixture;

let counter = 0;
/** Fresh names for one test, listed in an order that is not the sorted one. */
function names(...suffixes: string[]): string[] {
  counter += 1;
  return suffixes.map((suffix) => `all-${counter}/${suffix}`);
}

const specs = (list: string[]) => list.map((name) => ({ name }));

describe('lock.acquireAll', () => {
  it('against a lock held by another session: LOCK_HELD naming it, and none of the set is held afterwards', async () => {
    const a = await session();
    const b = await session();
    const [z, y, x] = names('z', 'y', 'x');
    const held = (await b.call('lock.acquire', { name: y, ttlMs: 30_000 })).result;
    const reply = await a.call('lock.acquireAll', {
      locks: specs([z!, y!, x!]),
      ttlMs: 30_000,
      waitMs: 200,
    });
    expect(reply.error.data).toMatchObject({ code: 'LOCK_HELD', name: y });
    // x sorts before y: it was taken during the wait, and given back before the error was sent.
    expect(await fixture.backend.inspect(x!)).toBeNull();
    expect(await fixture.backend.inspect(z!)).toBeNull();
    expect(await fixture.backend.inspect(y!)).toMatchObject({ token: BigInt(held.token) });
    // The failed set left nothing behind in the session's count either.
    expect(a.notifications).toEqual([]);
  });

  it('a connection that closes mid-wait ends the wait and releases what was granted', async () => {
    const waiter = await session();
    const b = await session();
    const [y, x] = names('y', 'x');
    await b.call('lock.acquire', { name: y, ttlMs: 30_000 });
    waiter.ws.send(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 99,
        method: 'lock.acquireAll',
        params: { locks: specs([y!, x!]), ttlMs: 30_000, waitMs: 20_000, owner: 'waiter' },
      }),
    );
    // x is taken first and held while the set waits for y.
    await until(async () => (await fixture.backend.inspect(x!))?.owner === 'waiter', 3_000);
    waiter.close();
    await until(async () => (await fixture.backend.inspect(x!)) === null, 3_000);
    // And y, released now, is not granted to the wait that ended.
    const holder = (await b.call('lock.get', { name: y })).result;
    await b.call('lock.release', { name: y, token: holder.token });
    await sleep(200);
    expect(await fixture.backend.inspect(y!)).toBeNull();
  });

  it('the same owner and key sent again, on another connection, get the same leases back', async () => {
    const a = await session();
    const b = await session();
    const set = names('b', 'a');
    const params = { locks: specs(set), ttlMs: 30_000, owner: 'retrier' };
    const first = (await a.call('lock.acquireAll', params)).result;
    const key = first.grants[0].leaseKey;
    expect(first.grants.map((g: { leaseKey: string }) => g.leaseKey)).toEqual([key, key]);
    const again = (await b.call('lock.acquireAll', { ...params, leaseKey: key })).result;
    expect(again.grants.map((g: { token: string }) => g.token)).toEqual(
      first.grants.map((g: { token: string }) => g.token),
    );
    // Without the key, another session naming the owner is somebody else.
    const stranger = await session();
    const refused = await stranger.call('lock.acquireAll', params);
    expect(refused.error.data.code).toBe('LOCK_HELD');
    // The session that re-sent it holds them now: it releases without the key.
    for (const grant of again.grants) {
      const released = await b.call('lock.release', { name: grant.name, token: grant.token });
      expect(released.result).toEqual({ released: true });
    }
  });

  it('every lease of the set is told lock.lost on its own', async () => {
    const a = await session();
    const set = names('b', 'a');
    const granted = (await a.call('lock.acquireAll', { locks: specs(set), ttlMs: 300 })).result;
    const lost = [await a.nextNotification('lock.lost'), await a.nextNotification('lock.lost')];
    expect(lost.map((n) => n.params).sort((p, q) => p.name.localeCompare(q.name))).toEqual(
      granted.grants
        .map((g: { name: string; token: string }) => ({
          name: g.name,
          token: g.token,
          reason: 'expired',
        }))
        .sort((p: { name: string }, q: { name: string }) => p.name.localeCompare(q.name)),
    );
  });

  it('maxLocksPerSession counts every name of the set', async () => {
    const limited = await startServer({ port: 0, limits: { maxLocksPerSession: 3 } });
    servers.push(limited);
    const a = await session(limited);
    await a.call('lock.acquire', { name: 'one', ttlMs: 30_000 });
    const tooMany = await a.call('lock.acquireAll', {
      locks: specs(['two', 'three', 'four']),
      ttlMs: 30_000,
    });
    expect(tooMany.error.data.code).toBe('LIMIT_EXCEEDED');
    // A name the session holds already is re-acquired, not added.
    const fits = await a.call('lock.acquireAll', {
      locks: specs(['one', 'two', 'three']),
      ttlMs: 30_000,
    });
    expect(fits.result.grants).toHaveLength(3);
  });

  it('a token must allow every name of the set; FORBIDDEN before anything is taken', async () => {
    const token = newToken();
    const guarded = await startServer({
      port: 0,
      auth: [{ name: 'jobs', sha256: hashToken(token), prefixes: ['jobs/'] }],
    });
    servers.push(guarded);
    const peer = await connect(guarded.url);
    peers.push(peer);
    await peer.hello(token);
    const reply = await peer.call('lock.acquireAll', {
      locks: specs(['jobs/a', 'other/b']),
      ttlMs: 30_000,
    });
    expect(reply.error.data.code).toBe('FORBIDDEN');
    expect((await peer.call('lock.get', { name: 'jobs/a' })).result.held).toBe(false);
    // Bad input is INVALID_PARAMS before it is FORBIDDEN, as for one name.
    const twice = await peer.call('lock.acquireAll', {
      locks: specs(['other/b', 'jobs/a', 'jobs/a']),
      ttlMs: 30_000,
    });
    expect(twice.error.data).toMatchObject({ code: 'INVALID_PARAMS', field: 'locks' });
    // The rest of the request is checked after the permission, as for one name.
    const noTtl = await peer.call('lock.acquireAll', { locks: specs(['other/b']) });
    expect(noTtl.error.data.code).toBe('FORBIDDEN');
  });
});

describe('lock.acquire mode', () => {
  it('passes mode and limit to core: shared is granted (a read lock), limit without shared is refused (field limit)', async () => {
    const a = await session();
    const [name] = names('m');
    const shared = await a.call('lock.acquire', { name, ttlMs: 30_000, mode: 'shared' });
    expect(shared.result).toMatchObject({ mode: 'shared', limit: 10_000 });
    await a.call('lock.release', { name, token: shared.result.token });
    const limit = await a.call('lock.acquire', { name, ttlMs: 30_000, limit: 2 });
    expect(limit.error.data).toMatchObject({ code: 'INVALID_PARAMS', field: 'limit' });
    const granted = await a.call('lock.acquire', { name, ttlMs: 30_000, mode: 'exclusive' });
    expect(granted.result.mode).toBe('exclusive');
  });

  it('hello reports maxLocksPerRequest', async () => {
    const peer = await connect(fixture.server.url);
    peers.push(peer);
    const hello = await peer.hello();
    expect(hello.limits.maxLocksPerRequest).toBe(64);
  });
});
