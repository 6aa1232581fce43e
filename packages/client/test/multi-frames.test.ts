import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createClient, type DlmClient } from '../src/index.js';
import { eventually, lockName, useServer } from './support.js';

// Multi-message frames (protocol extension): the client asks in session.hello; where the server
// agrees, the requests issued in one turn go out in one frame and replies come back grouped.

const env = useServer();

/** What crossed one client's WebSocket: frames sent, frames received, messages received. */
interface Traffic {
  sent: string[];
  received: unknown[];
}

/** A `ws` WebSocket that records every frame it sends and receives. */
function countingWebSocket(traffic: Traffic) {
  return class extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols);
      this.on('message', (data) => traffic.received.push(JSON.parse(data.toString())));
    }

    override send(data: unknown, ...rest: unknown[]): void {
      traffic.sent.push(String(data));
      (super.send as (...args: unknown[]) => void)(data, ...rest);
    }
  };
}

const clients: DlmClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
});

function client(traffic: Traffic, frames?: 'multi' | 'single'): DlmClient {
  const made = createClient({
    url: env.server.url,
    pingIntervalMs: 0,
    WebSocket: countingWebSocket(traffic) as never,
    ...(frames ? { frames } : {}),
  });
  clients.push(made);
  return made;
}

const parsed = (frame: string) => JSON.parse(frame) as unknown;
const isArrayFrame = (frame: unknown) => Array.isArray(frame);

describe('multi-message frames', () => {
  it('asks in session.hello, and the requests of one turn go out in one frame', async () => {
    const traffic: Traffic = { sent: [], received: [] };
    const c = client(traffic);
    await c.get(lockName('warm')); // hello, then one get
    const hello = parsed(traffic.sent[0]!) as { method: string; params: { frames?: string } };
    expect(hello.method).toBe('session.hello');
    expect(hello.params.frames).toBe('multi');
    const before = traffic.sent.length;
    const names = Array.from({ length: 8 }, (_, i) => lockName(`tick-${i}`));
    const leases = await Promise.all(names.map((name) => c.acquire(name, { ttlMs: 5_000 })));
    // All eight acquires were issued in one turn: one frame of eight requests.
    const frames = traffic.sent.slice(before).map(parsed);
    expect(frames).toHaveLength(1);
    expect((frames[0] as Array<{ method: string }>).map((m) => m.method)).toEqual(
      names.map(() => 'lock.acquire'),
    );
    // And the server's eight replies, ready in one turn, came back in one frame.
    expect(traffic.received.filter(isArrayFrame)).toHaveLength(1);
    expect(leases.map((lease) => lease.name)).toEqual(names);
    await Promise.all(leases.map((lease) => lease.release()));
    expect(await c.get(names[0]!)).toMatchObject({ held: false });
  });

  it('a waiting acquire in the same frame does not hold back the others', async () => {
    const traffic: Traffic = { sent: [], received: [] };
    const c = client(traffic);
    const holder = client({ sent: [], received: [] });
    const busy = lockName('busy');
    const held = await holder.acquire(busy, { ttlMs: 5_000 });
    const free = lockName('free');
    await c.get(free); // connected: the next requests go out together
    const before = traffic.sent.length;
    const waiting = c.acquire(busy, { ttlMs: 5_000, waitMs: 5_000 });
    const quick = await c.acquire(free, { ttlMs: 5_000 });
    expect(quick.name).toBe(free);
    const first = traffic.sent.slice(before).map(parsed)[0];
    expect(Array.isArray(first) ? first.length : 0).toBe(2);
    await held.release();
    expect((await waiting).name).toBe(busy);
  });

  it('a notification inside an array frame reaches its watch', async () => {
    const traffic: Traffic = { sent: [], received: [] };
    const c = client(traffic);
    const name = lockName('watched');
    const changes: Array<{ held: boolean }> = [];
    const watch = await c.watch(name, (change) => changes.push(change));
    const lease = await c.acquire(name, { ttlMs: 5_000 });
    await lease.release();
    await eventually(() => changes.length >= 3);
    // The current state first, then the grant and the release.
    expect(changes.map((change) => change.held)).toEqual([false, true, false]);
    // The grant's lock.changed was ready with the acquire's reply: they came in one frame.
    const grouped = traffic.received.filter(
      (frame) =>
        Array.isArray(frame) &&
        frame.some((m: { method?: string }) => m.method === 'lock.changed') &&
        frame.some((m: { id?: unknown }) => m.id !== undefined),
    );
    expect(grouped.length).toBeGreaterThan(0);
    await watch.stop();
  });

  it('frames "single": one message per frame, both ways, as a v1 client', async () => {
    const traffic: Traffic = { sent: [], received: [] };
    const c = client(traffic, 'single');
    const names = Array.from({ length: 4 }, (_, i) => lockName(`single-${i}`));
    const leases = await Promise.all(names.map((name) => c.acquire(name, { ttlMs: 5_000 })));
    await Promise.all(leases.map((lease) => lease.release()));
    const hello = parsed(traffic.sent[0]!) as { params: Record<string, unknown> };
    expect(hello.params).not.toHaveProperty('frames');
    expect(traffic.sent.map(parsed).some(isArrayFrame)).toBe(false);
    expect(traffic.received.some(isArrayFrame)).toBe(false);
    expect(traffic.sent).toHaveLength(1 + 4 + 4);
  });
});
