import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';
import { lateBackend } from './support.js';
import { openSession, type Peer } from './ws-peer.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const opened: { peers: Peer[]; servers: RunningServer[]; backends: LockBackend[] } = {
  peers: [],
  servers: [],
  backends: [],
};
afterEach(async () => {
  for (const peer of opened.peers.splice(0)) peer.close();
  await Promise.all(opened.servers.splice(0).map((server) => server.close()));
  await Promise.all(opened.backends.splice(0).map((backend) => backend.close()));
});

/** A server over an embedded backend made late by `delays`, and the backend itself. */
async function serve(delays: Parameters<typeof lateBackend>[1]) {
  const backend = await embeddedBackend();
  opened.backends.push(backend);
  const server = await startServer({ port: 0, backend: lateBackend(backend, delays) });
  opened.servers.push(server);
  const session = async () => {
    const peer = await openSession(server.url);
    opened.peers.push(peer);
    return peer;
  };
  return { backend, server, session };
}

/** The lock.changed notifications of `watchId` so far. */
function changesOf(peer: Peer, watchId: string) {
  return peer.notifications
    .filter((n) => n.method === 'lock.changed' && n.params.watchId === watchId)
    .map((n) => n.params);
}

describe('a grant the backend answers long after its event', () => {
  // The journaled embedded backend answers after the grant's fsync, well after its event: the
  // feed once gave the answer one turn, and told the second shared holder's grant without its
  // TTL (and the dashboard's history without its wait).
  it('lock.watchPrefix tells it once, with its TTL, and the history keeps its wait', async () => {
    const { server, session } = await serve({ answerMs: 100 });
    const holder = await session();
    const watcher = await session();
    const { watchId } = (await watcher.call('lock.watchPrefix', { prefix: 'late/' })).result;
    const shared = { mode: 'shared', limit: 3, ttlMs: 10_000 };
    await holder.call('lock.acquire', { name: 'late/pool', owner: 'p-1', ...shared });
    const second = (
      await holder.call('lock.acquire', { name: 'late/pool', owner: 'p-2', ...shared })
    ).result;
    const told = await watcher.arrived(() =>
      changesOf(watcher, watchId).find((change) => change.token === second.token),
    );
    expect(told).toMatchObject({ event: 'acquired', owner: 'p-2', holders: 2 });
    expect(told.ttlRemainingMs).toBeGreaterThan(8_000);
    await sleep(200);
    expect(changesOf(watcher, watchId).filter((c) => c.token === second.token)).toHaveLength(1);

    const response = await fetch(`${server.httpUrl}/v1/feed?prefix=late/`);
    const feed = (await response.json()) as { events: { type: string; token?: string }[] };
    const grant = feed.events.find(
      (event) => event.type === 'acquired' && event.token === second.token,
    );
    expect(grant).toMatchObject({ owner: 'p-2', waitedMs: 0 });
  });

  it('a grant made elsewhere meanwhile is told at once, not held back for the acquire here', async () => {
    const { backend, session } = await serve({ answerMs: 1_000 });
    const holder = await session();
    const watcher = await session();
    const { watchId } = (await watcher.call('lock.watchPrefix', { prefix: 'mixed/' })).result;
    const shared = { mode: 'shared', limit: 3, ttlMs: 10_000 } as const;
    await holder.call('lock.acquire', { name: 'mixed/pool', owner: 'here-1', ...shared });
    // Answered a second late: in flight while another server grants a permit.
    const ours = holder.call('lock.acquire', { name: 'mixed/pool', owner: 'here-2', ...shared });
    await sleep(50);
    const startedAt = Date.now();
    const elsewhere = await backend.tryAcquire({ name: 'mixed/pool', owner: 'there', ...shared });
    if (!elsewhere.granted) throw new Error('setup: not granted');
    await watcher.arrived(() =>
      changesOf(watcher, watchId).find((change) => change.owner === 'there'),
    );
    expect(Date.now() - startedAt).toBeLessThan(500);
    const mine = (await ours).result;
    const told = await watcher.arrived(() =>
      changesOf(watcher, watchId).find((change) => change.token === mine.token),
    );
    expect(told.ttlRemainingMs).toBeGreaterThan(8_000);
  });
});

describe('a grant whose event arrives after a lock.watch read the state', () => {
  it('is not told again: the answer showed it', async () => {
    const { session } = await serve({ eventMs: 150 });
    const holder = await session();
    const watcher = await session();
    const lease = (await holder.call('lock.acquire', { name: 'seen', ttlMs: 10_000 })).result;
    const watch = (await watcher.call('lock.watch', { name: 'seen' })).result;
    expect(watch).toMatchObject({ held: true, token: lease.token });
    await sleep(400);
    expect(changesOf(watcher, watch.watchId)).toEqual([]);
    // What comes after the answer is still told, once.
    await holder.call('lock.release', { name: 'seen', token: lease.token });
    const ended = await watcher.arrived(() => changesOf(watcher, watch.watchId)[0]);
    expect(ended).toMatchObject({ held: false, holders: 0 });
    const next = (await holder.call('lock.acquire', { name: 'seen', ttlMs: 10_000 })).result;
    const granted = await watcher.arrived(() => changesOf(watcher, watch.watchId)[1]);
    expect(granted).toMatchObject({ held: true, token: next.token });
    await sleep(300);
    expect(changesOf(watcher, watch.watchId)).toHaveLength(2);
  });
});
