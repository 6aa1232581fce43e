import { createManualClock } from '@dlm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { createFeedHistory, HISTORY_MAX_AGE_MS, HISTORY_MAX_EVENTS } from '../src/feed-history.js';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

function history(options: { maxEvents?: number; maxAgeMs?: number; rateSeconds?: number } = {}) {
  const clock = createManualClock(1_000_000);
  return { clock, history: createFeedHistory({ clock, ...options }) };
}

const grant = (name: string, token: bigint) =>
  ({ type: 'acquired', name, owner: 'o', token, waitedMs: 0 }) as const;

describe('the feed history ring', () => {
  it('keeps the last maxEvents events, oldest first, and never more', () => {
    const { history: ring } = history({ maxEvents: 5 });
    for (let i = 1; i <= 12; i += 1) ring.record(grant(`n${i}`, BigInt(i)));
    expect(ring.size).toBe(5);
    expect(ring.seq).toBe(12);
    expect(ring.since(0, '').map((event) => event.name)).toEqual(['n8', 'n9', 'n10', 'n11', 'n12']);
  });

  it('drops events older than maxAgeMs, even when nothing new is recorded', () => {
    const { clock, history: ring } = history({ maxEvents: 100, maxAgeMs: 10_000 });
    ring.record(grant('old', 1n));
    clock.advance(6_000);
    ring.record(grant('newer', 2n));
    clock.advance(5_000);
    expect(ring.since(0, '').map((event) => event.name)).toEqual(['newer']);
    clock.advance(5_001);
    expect(ring.size).toBe(0);
    expect(ring.since(0, '')).toEqual([]);
  });

  it('bounds a busy server by count and an idle one by age (the defaults)', () => {
    const { clock, history: ring } = history();
    for (let i = 0; i < HISTORY_MAX_EVENTS * 3; i += 1) ring.record(grant('busy', BigInt(i + 1)));
    expect(ring.size).toBe(HISTORY_MAX_EVENTS);
    clock.advance(HISTORY_MAX_AGE_MS + 1);
    expect(ring.size).toBe(0);
  });

  it('since(after) gives only newer events under the prefix; a seq from before a restart gives all', () => {
    const { history: ring } = history();
    ring.record(grant('jobs/a', 1n));
    ring.record(grant('pay/b', 2n));
    ring.record({ type: 'released', name: 'jobs/a', owner: 'o', token: 1n, heldMs: 40 });
    expect(ring.since(1, 'jobs/').map((event) => [event.seq, event.type])).toEqual([
      [3, 'released'],
    ]);
    expect(ring.since(99, '').map((event) => event.seq)).toEqual([1, 2, 3]);
  });

  it('counts each kind per second, over a fixed window whatever the load', () => {
    const { clock, history: ring } = history({ rateSeconds: 4 });
    ring.record(grant('a', 1n));
    ring.record(grant('b', 2n));
    clock.advance(1_000);
    ring.record({ type: 'expired', name: 'a', owner: 'o', token: 1n });
    ring.queued('b', 2);
    clock.advance(1_000);
    ring.record({ type: 'released', name: 'b', owner: 'o', token: 2n });
    expect(ring.rates('')).toEqual({
      grants: [0, 2, 0, 0],
      releases: [0, 0, 0, 1],
      expiries: [0, 0, 1, 0],
      waits: [0, 0, 2, 0],
    });
    // Seconds older than the window are forgotten, their slots reused.
    clock.advance(4_000);
    ring.record(grant('c', 3n));
    expect(ring.rates('')).toEqual({
      grants: [0, 0, 0, 1],
      releases: [0, 0, 0, 0],
      expiries: [0, 0, 0, 0],
      waits: [0, 0, 0, 0],
    });
    // A filtered view counts the ring's events under the prefix.
    expect(ring.rates('c').grants).toEqual([0, 0, 0, 1]);
    expect(ring.rates('a').grants).toEqual([0, 0, 0, 0]);
  });

  it('follows how long each queued acquire waits, and forgets a name once nobody waits', () => {
    const { clock, history: ring } = history();
    ring.queued('q', 1);
    clock.advance(300);
    ring.queued('q', 3);
    clock.advance(200);
    expect(ring.waitingMs('q')).toEqual([500, 200, 200]);
    ring.queued('q', 1);
    expect(ring.waitingMs('q')).toEqual([200]);
    ring.queued('q', 0);
    expect([...ring.waitingNames()]).toEqual([]);
    expect(ring.since(0, '').filter((event) => event.type === 'queued')).toHaveLength(3);
  });
});

describe('GET /v1/feed', () => {
  let server: RunningServer | undefined;
  const peers: Peer[] = [];
  afterEach(async () => {
    for (const peer of peers.splice(0)) peer.close();
    await server?.close();
    server = undefined;
  });

  async function feed(path: string, token?: string) {
    const response = await fetch(`${server!.httpUrl}${path}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    return { status: response.status, body: (await response.json()) as Record<string, any> };
  }

  it('tells a new reader the grants, waits and ends before it came, then only what is newer', async () => {
    server = await startServer({ port: 0 });
    const holder = await openSession(server.url);
    const waiter = await openSession(server.url);
    peers.push(holder, waiter);
    const first = (await holder.call('lock.acquire', { name: 'h/a', owner: 'one', ttlMs: 30_000 }))
      .result;
    const queued = waiter.call('lock.acquire', {
      name: 'h/a',
      owner: 'two',
      ttlMs: 30_000,
      waitMs: 10_000,
    });
    // The acquire was sent, not answered: poll until it has queued.
    const locks = async () => (await feed('/v1/feed?prefix=h%2F')).body.locks;
    await expect.poll(async () => (await locks())[0]?.waitingMs.length).toBe(1);
    expect(await locks()).toEqual([
      {
        name: 'h/a',
        token: first.token,
        heldMs: expect.any(Number),
        waitingMs: [expect.any(Number)],
      },
    ]);
    await holder.call('lock.release', { name: 'h/a', token: first.token });
    const second = (await queued).result;

    const all = await feed('/v1/feed');
    expect(all.status).toBe(200);
    expect(
      all.body.events.map((event: { type: string; owner?: string }) => [event.type, event.owner]),
    ).toEqual([
      ['acquired', 'one'],
      ['queued', undefined],
      ['released', 'one'],
      ['acquired', 'two'],
    ]);
    const [, , released, granted] = all.body.events;
    expect(released).toMatchObject({ name: 'h/a', token: first.token, heldMs: expect.any(Number) });
    expect(granted).toMatchObject({ token: second.token, waitedMs: expect.any(Number) });
    expect(granted.waitedMs).toBeGreaterThanOrEqual(0);
    expect(all.body.rates.grants.reduce((sum: number, n: number) => sum + n, 0)).toBe(2);
    expect(all.body.rates.waits.reduce((sum: number, n: number) => sum + n, 0)).toBe(1);
    expect(all.body).toMatchObject({
      seq: 4,
      maxEvents: HISTORY_MAX_EVENTS,
      maxAgeMs: HISTORY_MAX_AGE_MS,
    });

    const newer = await feed(`/v1/feed?after=${all.body.seq - 1}`);
    expect(newer.body.events.map((event: { seq: number }) => event.seq)).toEqual([4]);
    expect((await feed('/v1/feed?prefix=other%2F')).body.events).toEqual([]);
  });

  it('refuses bad input with a stable code, and a token outside its prefixes', async () => {
    const viewer = newToken();
    server = await startServer({
      port: 0,
      auth: [
        { name: 'viewer', sha256: hashToken(viewer), actions: ['watch'], prefixes: ['team/'] },
      ],
    });
    expect((await feed('/v1/feed')).status).toBe(401);
    const everything = await feed('/v1/feed', viewer);
    expect(everything.status).toBe(403);
    expect(everything.body.error).toMatchObject({ code: 'FORBIDDEN' });
    expect(everything.body.error.message).toContain('may not watch the prefix ""');
    expect((await feed('/v1/feed?prefix=team%2F', viewer)).status).toBe(200);
    const badAfter = await feed('/v1/feed?prefix=team%2F&after=-3', viewer);
    expect(badAfter.status).toBe(400);
    expect(badAfter.body.error).toMatchObject({ code: 'INVALID_PARAMS', field: 'after' });
    expect(badAfter.body.error.message).toContain('whole number');
    const badPrefix = await feed(`/v1/feed?prefix=${'x'.repeat(1_000)}`, viewer);
    expect(badPrefix.body.error).toMatchObject({ code: 'INVALID_PARAMS', field: 'prefix' });
  });
});
