import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  hashToken,
  newToken,
  type RunningServer,
  startServer,
  type TokenGrant,
} from '../src/index.js';
import { connect, type Peer } from './ws-peer.js';

const ADMIN = newToken();
const JOBS = newToken();
const WATCHER = newToken();
const GRANTS: TokenGrant[] = [
  { name: 'ops', sha256: hashToken(ADMIN), actions: ['lock', 'watch', 'admin'] },
  { name: 'jobs-runner', sha256: hashToken(JOBS), prefixes: ['jobs/'] },
  { name: 'jobs-viewer', sha256: hashToken(WATCHER), prefixes: ['jobs/'], actions: ['watch'] },
];

let server: RunningServer;
const peers: Peer[] = [];

async function session(token: string): Promise<Peer> {
  const peer = await connect(server.url);
  peers.push(peer);
  await peer.hello(token);
  return peer;
}

/** The release-request counter's value for `event` in the server's metrics. */
async function requests(event: 'asked' | 'delivered'): Promise<number> {
  const response = await fetch(`${server.httpUrl}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  const text = await response.text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`dlm_release_requests_total{event="${event}"}`));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

beforeAll(async () => {
  server = await startServer({ port: 0, auth: GRANTS });
});
afterAll(async () => {
  for (const peer of peers) peer.close();
  await server.close();
});

describe('lock.requestRelease on the server', () => {
  it('needs the lock permission on the name: watch alone, or another prefix, is FORBIDDEN', async () => {
    const viewer = await session(WATCHER);
    const denied = await viewer.call('lock.requestRelease', { name: 'jobs/a' });
    expect(denied.error?.data).toMatchObject({ code: 'FORBIDDEN' });
    const runner = await session(JOBS);
    const elsewhere = await runner.call('lock.requestRelease', { name: 'other/a' });
    expect(elsewhere.error?.data).toMatchObject({ code: 'FORBIDDEN' });
    const allowed = await runner.call('lock.requestRelease', { name: 'jobs/a' });
    expect(allowed.result).toEqual({ name: 'jobs/a', notified: 0 });
  });

  it('counts requests asked and heard, and the feed shows the request', async () => {
    const [askedBefore, deliveredBefore] = [await requests('asked'), await requests('delivered')];
    const holder = await session(JOBS);
    await holder.call('lock.acquire', { name: 'jobs/counted', ttlMs: 10_000 });
    const asker = await session(ADMIN);
    const reply = await asker.call('lock.requestRelease', { name: 'jobs/counted', reason: 'r' });
    expect(reply.result).toEqual({ name: 'jobs/counted', notified: 1 });
    const heard = await holder.nextNotification('lock.releaseRequested');
    expect(heard.params).toMatchObject({ name: 'jobs/counted', reason: 'r' });
    // A free name asks nobody: not counted.
    await asker.call('lock.requestRelease', { name: 'jobs/free' });
    expect((await requests('asked')) - askedBefore).toBe(1);
    expect((await requests('delivered')) - deliveredBefore).toBe(1);
    const feed = await fetch(`${server.httpUrl}/v1/feed?prefix=jobs/`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    const { events } = (await feed.json()) as { events: Array<{ type: string; name: string }> };
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'releaseRequested', name: 'jobs/counted' }),
    );
  });

  it('is served over POST /v1/rpc too', async () => {
    const holder = await session(JOBS);
    await holder.call('lock.acquire', { name: 'jobs/http', ttlMs: 10_000 });
    const response = await fetch(`${server.httpUrl}/v1/rpc`, {
      method: 'POST',
      headers: { authorization: `Bearer ${JOBS}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'lock.requestRelease',
        params: { name: 'jobs/http' },
      }),
    });
    expect(await response.json()).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { name: 'jobs/http', notified: 1 },
    });
    const heard = await holder.nextNotification('lock.releaseRequested');
    expect(heard.params).toEqual({ name: 'jobs/http', token: expect.any(String) });
  });
});
